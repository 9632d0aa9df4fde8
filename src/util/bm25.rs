//! The one BM25 scorer, shared by the skills catalog (`skill_search`, `GET /api/skills?query=`,
//! docs/skills.md §5: k1 = 1.2) and MCP `tool_search` (docs/tools-and-mcp.md §8: k1 = 1.5). It owns the
//! inverted index over already tokenised documents and the Okapi formula with
//! `idf = ln(1 + (N − df + 0.5) / (df + 0.5))`; the callers keep their own tokenisers, bonuses
//! and tie rules' meaning (both break ties by document order). Built once per catalog or MCP
//! generation, then read-only: any thread may query it.

use std::collections::HashMap;

/// The two free parameters of BM25.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Params {
    /// Term-frequency saturation.
    pub(crate) k1: f64,
    /// Length normalisation (0 = none, 1 = full).
    pub(crate) b: f64,
}

/// An inverted index: per token, the documents holding it with their term frequency.
#[derive(Debug, Clone)]
pub(crate) struct Index {
    params: Params,
    postings: HashMap<String, Vec<(u32, u32)>>,
    doc_len: Vec<u32>,
    avgdl: f64,
}

impl Index {
    /// Indexes `docs` (each a token list) in order; a document's position is its id.
    pub(crate) fn build<D, T>(params: Params, docs: D) -> Index
    where
        D: IntoIterator<Item = T>,
        T: IntoIterator<Item = String>,
    {
        let mut postings: HashMap<String, Vec<(u32, u32)>> = HashMap::new();
        let mut doc_len = Vec::new();
        for (i, tokens) in docs.into_iter().enumerate() {
            let mut tf: HashMap<String, u32> = HashMap::new();
            let mut len = 0u32;
            for t in tokens {
                *tf.entry(t).or_default() += 1;
                len += 1;
            }
            doc_len.push(len);
            for (t, n) in tf {
                postings.entry(t).or_default().push((i as u32, n));
            }
        }
        let total: u64 = doc_len.iter().map(|n| u64::from(*n)).sum();
        let avgdl = if doc_len.is_empty() { 0.0 } else { total as f64 / doc_len.len() as f64 };
        Index { params, postings, doc_len, avgdl }
    }

    /// Number of documents.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.doc_len.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.doc_len.is_empty()
    }

    /// BM25 of every document against `query`; each occurrence of a query token counts again
    /// (duplicates weigh more). Documents sharing no token keep 0.
    pub(crate) fn score(&self, query: &[String]) -> Scores {
        let Params { k1, b } = self.params;
        let n = self.doc_len.len() as f64;
        let mut scores = Scores { values: vec![0.0; self.doc_len.len()], touched: Vec::new() };
        for tok in query {
            let Some(list) = self.postings.get(tok) else { continue };
            let df = list.len() as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(doc, tf) in list {
                let tf = f64::from(tf);
                let dl = f64::from(self.doc_len[doc as usize]);
                // A posting implies a token, so `avgdl > 0` here.
                let part = tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * dl / self.avgdl));
                scores.add(doc as usize, idf * part);
            }
        }
        scores
    }
}

/// Per-document scores of one query.
#[derive(Debug, Clone)]
pub(crate) struct Scores {
    values: Vec<f64>,
    /// Documents that received any addition, in first-touch order.
    touched: Vec<u32>,
}

impl Scores {
    /// Adds `amount` (> 0) to document `doc`: a term's share, or a caller's bonus such as an
    /// exact-name match. Scores only grow, so a document is listed in `touched` once.
    pub(crate) fn add(&mut self, doc: usize, amount: f64) {
        let Some(v) = self.values.get_mut(doc) else { return };
        if *v == 0.0 {
            self.touched.push(doc as u32);
        }
        *v += amount;
    }

    /// Documents with a positive score, best first, ties in document order, at most `limit`.
    pub(crate) fn ranked(self, limit: usize) -> Vec<(usize, f64)> {
        let Scores { values, touched } = self;
        let mut hits: Vec<(usize, f64)> =
            touched.into_iter().map(|d| (d as usize, values[d as usize])).filter(|(_, s)| *s > 0.0).collect();
        // Scores are finite and document ids unique, so this is a total order: selecting the
        // best `limit` first and sorting only those gives the same list as a full sort.
        let order = |a: &(usize, f64), b: &(usize, f64)| {
            b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal).then(a.0.cmp(&b.0))
        };
        if limit == 0 {
            return Vec::new();
        }
        if hits.len() > limit {
            hits.select_nth_unstable_by(limit - 1, order);
            hits.truncate(limit);
        }
        hits.sort_by(order);
        hits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    fn index(k1: f64, docs: &[&str]) -> Index {
        Index::build(Params { k1, b: 0.75 }, docs.iter().map(|d| toks(d)))
    }

    #[test]
    fn score_matches_the_formula() {
        // "alpha beta" and "alpha"; query "beta": N = 2, df = 1, avgdl = 1.5, dl = 2.
        let idx = index(1.5, &["alpha beta", "alpha"]);
        let idf = (1.0 + (2.0 - 1.0 + 0.5) / (1.0 + 0.5f64)).ln();
        let want = idf * (1.0 * 2.5) / (1.0 + 1.5 * (1.0 - 0.75 + 0.75 * 2.0 / 1.5));
        let hits = idx.score(&toks("beta")).ranked(8);
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].0, 0);
        assert!((hits[0].1 - want).abs() < 1e-12, "{} vs {want}", hits[0].1);
        assert_eq!((idx.len(), idx.is_empty()), (2, false));
    }

    #[test]
    fn duplicates_count_ties_keep_order_bonus_and_limit() {
        let idx = index(1.2, &["gamma", "gamma", "delta"]);
        let once = idx.score(&toks("gamma")).ranked(8);
        let twice = idx.score(&toks("gamma gamma")).ranked(8);
        assert_eq!(once.iter().map(|h| h.0).collect::<Vec<_>>(), [0, 1]);
        assert!((twice[0].1 - 2.0 * once[0].1).abs() < 1e-12);
        assert_eq!(idx.score(&toks("gamma")).ranked(1).len(), 1);
        // A bonus can lift an untouched document and reorder ties.
        let mut s = idx.score(&toks("gamma"));
        s.add(2, 10.0);
        s.add(1, 0.5);
        assert_eq!(s.ranked(8).iter().map(|h| h.0).collect::<Vec<_>>(), [2, 1, 0]);
        assert!(idx.score(&toks("zzz")).ranked(8).is_empty());
        assert!(idx.score(&[]).ranked(8).is_empty());
        // Top-k selection returns the head of the full ranking, ties by document order.
        let many: Vec<String> = (0..200).map(|i| format!("w{} common", i % 7)).collect();
        let idx = Index::build(Params { k1: 1.2, b: 0.75 }, many.iter().map(|d| toks(d)));
        let full = idx.score(&toks("common w3 w5")).ranked(1000);
        for k in [1, 5, 29, 30, 199] {
            assert_eq!(idx.score(&toks("common w3 w5")).ranked(k), full[..k.min(full.len())], "k = {k}");
        }
        assert!(idx.score(&toks("common")).ranked(0).is_empty());
        let empty = Index::build(Params { k1: 1.2, b: 0.75 }, Vec::<Vec<String>>::new());
        assert!(empty.is_empty() && empty.score(&toks("a")).ranked(8).is_empty());
    }
}
