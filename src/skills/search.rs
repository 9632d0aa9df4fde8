//! BM25 search over skill records (skills.md §5): the tokenizer, the per-document token
//! lists built once per catalog refresh, and scoring with a deterministic order. Pure; any thread.

use std::collections::HashMap;

/// Tokens of `text`: lowercase `[a-z0-9_.-]+` runs and single CJK ideographs (U+4E00–U+9FFF),
/// then every 2-char window of the whitespace-free text that starts with a CJK ideograph.
pub fn tokenize(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let mut out = Vec::new();
    let mut run = String::new();
    for c in lower.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '-') {
            run.push(c);
            continue;
        }
        if !run.is_empty() {
            out.push(std::mem::take(&mut run));
        }
        if is_cjk(c) {
            out.push(c.to_string());
        }
    }
    if !run.is_empty() {
        out.push(run);
    }
    let compact: Vec<char> = lower.chars().filter(|c| !c.is_whitespace()).collect();
    for w in compact.windows(2) {
        if is_cjk(w[0]) {
            out.push(w.iter().collect());
        }
    }
    out
}

fn is_cjk(c: char) -> bool {
    ('\u{4e00}'..='\u{9fff}').contains(&c)
}

/// One searchable document: its name and term frequencies.
#[derive(Debug, Clone)]
pub struct Doc {
    pub name: String,
    pub len: usize,
    pub tf: HashMap<String, u32>,
}

impl Doc {
    /// Builds the document from name, display name, description, tags and triggers.
    pub fn new(name: &str, fields: &[&str]) -> Doc {
        let tokens = tokenize(&fields.join(" "));
        let mut tf = HashMap::new();
        for t in &tokens {
            *tf.entry(t.clone()).or_insert(0) += 1;
        }
        Doc { name: name.to_string(), len: tokens.len(), tf }
    }
}

/// Scores `docs` (already filtered to the eligible set) against `query`; returns
/// `(index into docs, score)` with score > 0, sorted by score desc then name asc, cut to `limit`.
pub fn rank(docs: &[&Doc], query: &str, limit: usize) -> Vec<(usize, f64)> {
    let q = tokenize(query);
    if q.is_empty() || docs.is_empty() {
        return Vec::new();
    }
    let n = docs.len() as f64;
    let avg = (docs.iter().map(|d| d.len).sum::<usize>() as f64 / n).max(1.0);
    let mut df: HashMap<&str, f64> = HashMap::new();
    for t in &q {
        if !df.contains_key(t.as_str()) {
            let c = docs.iter().filter(|d| d.tf.contains_key(t)).count();
            df.insert(t.as_str(), c as f64);
        }
    }
    let exact = query.trim().to_lowercase();
    let mut scored: Vec<(usize, f64)> = docs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let mut s = 0.0;
            for t in &q {
                let Some(&tf) = d.tf.get(t) else { continue };
                let tf = f64::from(tf);
                let dfv = df[t.as_str()];
                let idf = (1.0 + (n - dfv + 0.5) / (dfv + 0.5)).ln();
                s += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * d.len as f64 / avg));
            }
            if d.name == exact {
                s += 10.0;
            }
            (i, s)
        })
        .filter(|(_, s)| *s > 0.0)
        .collect();
    scored.sort_by(|a, b| {
        b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal).then_with(|| docs[a.0].name.cmp(&docs[b.0].name))
    });
    scored.truncate(limit.clamp(1, 10_000));
    scored
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_keeps_punctuated_words_and_cjk() {
        assert_eq!(
            tokenize("Chart-Viz v1.2 snake_case, 认知扭曲!"),
            vec!["chart-viz", "v1.2", "snake_case", "认", "知", "扭", "曲", "认知", "知扭", "扭曲", "曲!"]
        );
        assert!(tokenize("  ,;  ").is_empty());
        // The window's second char may be anything except whitespace (which is removed first).
        assert_eq!(tokenize("天 a"), vec!["天", "a", "天a"]);
    }

    #[test]
    fn ranking_is_bm25_with_name_bonus_and_stable_ties() {
        let a = Doc::new("weather", &["weather", "", "Forecasts and current weather", "", ""]);
        let b = Doc::new("github", &["github", "", "Pull requests, issues via gh", "", ""]);
        let c = Doc::new("alpha", &["alpha", "", "same words", "", ""]);
        let d = Doc::new("beta", &["beta", "", "same words", "", ""]);
        let docs = vec![&a, &b, &c, &d];
        let r = rank(&docs, "weather", 10);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].0, 0);
        assert!(r[0].1 > 10.0);
        let r = rank(&docs, "same", 10);
        assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), vec![2, 3]);
        assert!((r[0].1 - r[1].1).abs() < 1e-12);
        assert!(rank(&docs, "zzz", 10).is_empty());
        assert!(rank(&docs, "!!", 10).is_empty());
        assert_eq!(rank(&docs, "same", 0).len(), 1);
        // Hand-computed BM25 for one term in one of four docs with equal lengths.
        let e1 = Doc::new("x1", &["aa"]);
        let e2 = Doc::new("x2", &["bb"]);
        let e3 = Doc::new("x3", &["cc"]);
        let e4 = Doc::new("x4", &["dd"]);
        let r = rank(&[&e1, &e2, &e3, &e4], "aa", 5);
        let idf = (1.0f64 + (4.0 - 1.0 + 0.5) / 1.5).ln();
        assert!((r[0].1 - idf * 2.2 / (1.0 + 1.2)).abs() < 1e-12);
    }
}
