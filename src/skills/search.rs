//! Skill search (docs/skills.md §5): the contract's tokenizer and the catalog's two BM25 indexes
//! (every record, enabled ones), built once per refresh over the shared scorer
//! ([`crate::util::bm25`]), plus the exact-name bonus and the name-order tie rule. Pure; any
//! thread.

use crate::util::bm25::{Index, Params};

/// Tokens of `text`: lowercase `[a-z0-9_.-]+` runs and single CJK ideographs (U+4E00–U+9FFF),
/// then every 2-char window of the whitespace-free text that starts with a CJK ideograph.
pub(crate) fn tokenize(text: &str) -> Vec<String> {
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

/// BM25 parameters of the skills contract.
pub(crate) const PARAMS: Params = Params { k1: 1.2, b: 0.75 };
/// Added when the trimmed, lower-cased query equals a skill's name.
pub(crate) const EXACT_NAME_BONUS: f64 = 10.0;
/// Most results one query returns.
pub(crate) const MAX_RESULTS: usize = 10_000;

/// The tokens of one skill document: name, display name, description, tags and triggers.
pub(crate) fn doc_tokens(fields: &[&str]) -> Vec<String> {
    tokenize(&fields.join(" "))
}

/// One BM25 index with the skill name of each document (documents in name order, so the
/// index's document-order tie rule is the contract's name order).
#[derive(Debug, Clone)]
struct Ranked {
    index: Index,
    names: Vec<String>,
}

impl Ranked {
    fn build(docs: Vec<(String, Vec<String>)>) -> Ranked {
        let (names, tokens): (Vec<String>, Vec<Vec<String>>) = docs.into_iter().unzip();
        Ranked { index: Index::build(PARAMS, tokens), names }
    }
}

/// The search side of one catalog. Document frequencies and lengths are those of the eligible
/// set, so there is one index over every record and one over the enabled ones.
#[derive(Debug, Clone)]
pub(crate) struct SkillIndex {
    all: Ranked,
    enabled: Ranked,
}

impl Default for SkillIndex {
    fn default() -> Self {
        SkillIndex::build(Vec::new())
    }
}

impl SkillIndex {
    /// Builds both indexes from `(name, tokens, enabled)`, given in name order.
    pub(crate) fn build(docs: Vec<(String, Vec<String>, bool)>) -> SkillIndex {
        let enabled = docs.iter().filter(|d| d.2).map(|(n, t, _)| (n.clone(), t.clone())).collect();
        let all = docs.into_iter().map(|(n, t, _)| (n, t)).collect();
        SkillIndex { all: Ranked::build(all), enabled: Ranked::build(enabled) }
    }

    /// Names with score > 0, sorted by score desc then name asc, at most `limit` (clamped to
    /// 1..=[`MAX_RESULTS`]); disabled skills only with `include_disabled`.
    pub(crate) fn rank(&self, query: &str, limit: usize, include_disabled: bool) -> Vec<(&str, f64)> {
        let r = if include_disabled { &self.all } else { &self.enabled };
        let q = tokenize(query);
        if q.is_empty() || r.names.is_empty() {
            return Vec::new();
        }
        let mut scores = r.index.score(&q);
        let exact = query.trim().to_lowercase();
        if let Ok(i) = r.names.binary_search(&exact) {
            scores.add(i, EXACT_NAME_BONUS);
        }
        scores.ranked(limit.clamp(1, MAX_RESULTS)).into_iter().map(|(i, s)| (r.names[i].as_str(), s)).collect()
    }
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

    fn index(docs: &[(&str, &str, bool)]) -> SkillIndex {
        let mut v: Vec<(String, Vec<String>, bool)> =
            docs.iter().map(|(n, d, e)| (n.to_string(), doc_tokens(&[n, "", d, "", ""]), *e)).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        SkillIndex::build(v)
    }

    #[test]
    fn ranking_is_bm25_with_name_bonus_and_stable_ties() {
        let idx = index(&[
            ("weather", "Forecasts and current weather", true),
            ("github", "Pull requests, issues via gh", true),
            ("alpha", "same words", true),
            ("beta", "same words", true),
        ]);
        let r = idx.rank("weather", 10, false);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].0, "weather");
        assert!(r[0].1 > 10.0);
        let r = idx.rank("same", 10, false);
        assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), vec!["alpha", "beta"]);
        assert!((r[0].1 - r[1].1).abs() < 1e-12);
        assert!(idx.rank("zzz", 10, false).is_empty());
        assert!(idx.rank("!!", 10, false).is_empty());
        assert_eq!(idx.rank("same", 0, false).len(), 1);
        // Hand-computed BM25 for one term in one of four docs with equal lengths.
        let e = index(&[("x1", "aa", true), ("x2", "bb", true), ("x3", "cc", true), ("x4", "dd", true)]);
        let r = e.rank("aa", 5, false);
        let idf = (1.0f64 + (4.0 - 1.0 + 0.5) / 1.5).ln();
        // Each document is "xN <word>": two tokens, avg 2.
        assert!((r[0].1 - idf * 2.2 / (1.0 + 1.2)).abs() < 1e-12);
    }

    #[test]
    fn disabled_documents_leave_the_statistics_of_the_enabled_index() {
        let idx = index(&[("one", "shared word", true), ("two", "shared word", false), ("three", "other", true)]);
        let enabled = idx.rank("shared", 10, false);
        let all = idx.rank("shared", 10, true);
        assert_eq!(enabled.iter().map(|x| x.0).collect::<Vec<_>>(), ["one"]);
        assert_eq!(all.iter().map(|x| x.0).collect::<Vec<_>>(), ["one", "two"]);
        // df = 1 of N = 2 when enabled only, df = 2 of N = 3 with the disabled one.
        assert!(enabled[0].1 > all[0].1);
        // The exact-name bonus reaches a document only through its eligible index.
        assert!(idx.rank("two", 10, false).is_empty());
        assert!(idx.rank("two", 10, true)[0].1 > EXACT_NAME_BONUS);
    }

    /// Rankings and scores of a fixed corpus as the catalog's own BM25 gave them before the
    /// scorer was shared with `tool_search` (printed to 12 decimals then).
    #[test]
    fn a_fixed_corpus_ranks_as_before() {
        let docs = [
            (
                "chart-visualization",
                "Chart Visualization",
                "Render one self-contained HTML chart with ECharts",
                "chart html",
                "图表 可视化",
            ),
            ("github", "GitHub", "Pull requests, issues and Actions through the gh CLI", "git pr", "pull request"),
            ("report-writer", "报告撰写", "Write a weekly report from notes", "report weekly", "周报 报告"),
            ("weather", "Weather", "Current weather and forecast from wttr.in", "weather forecast", "天气 预报"),
            ("weather-alerts", "Weather alerts", "Severe weather warnings for a city", "weather", "警报"),
        ];
        let idx = SkillIndex::build(
            docs.iter().map(|(n, l, d, t, g)| (n.to_string(), doc_tokens(&[n, l, d, t, g]), true)).collect(),
        );
        let cases: &[(&str, &[(&str, f64)])] = &[
            ("weather", &[("weather", 11.495946580333), ("weather-alerts", 1.462808523174)]),
            ("weather forecast", &[("weather", 3.432357751421), ("weather-alerts", 1.462808523174)]),
            ("pull request", &[("github", 3.487630595828)]),
            (
                "报告",
                &[("report-writer", 4.276068309033), ("weather-alerts", 0.608098616211), ("weather", 0.551531303075)],
            ),
            (
                "天气预报",
                &[("weather", 9.062733892276), ("report-writer", 0.790528201075), ("weather-alerts", 0.608098616211)],
            ),
            ("chart html report", &[("chart-visualization", 3.924147702604), ("report-writer", 1.742770053979)]),
            ("Weather-Alerts", &[("weather-alerts", 11.564024407417)]),
            ("nothing", &[]),
        ];
        for (q, want) in cases {
            let got = idx.rank(q, 10, false);
            assert_eq!(
                got.iter().map(|h| h.0).collect::<Vec<_>>(),
                want.iter().map(|w| w.0).collect::<Vec<_>>(),
                "{q}"
            );
            for (g, w) in got.iter().zip(want.iter()) {
                assert!((g.1 - w.1).abs() < 1e-11, "{q}: {} scored {} (was {})", g.0, g.1, w.1);
            }
        }
    }
}
