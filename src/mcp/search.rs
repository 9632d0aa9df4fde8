//! `tool_search` ranking (docs/tools-and-mcp.md §8): one document per MCP tool (cached schemas
//! overlaid by live tools, live wins) plus one entry per configured server that has neither,
//! tokenised with ASCII camelCase/snake_case splitting and CJK bigrams, ranked with the shared
//! BM25 scorer ([`crate::util::bm25`], k1 = 1.5, b = 0.75). Only MCP servers are indexed;
//! built-in tools are always visible.
//!
//! Pure: the manager gathers each server's cached and live tools and caches the index per
//! content generation; a turn worker runs the query.

use std::sync::Arc;

use super::cache::CachedTool;
use super::catalog::ServerConfig;
use super::tool::LiveTool;

use crate::util::bm25::{Index, Params};

/// BM25 parameters of the `tool_search` contract.
pub(crate) const PARAMS: Params = Params { k1: 1.5, b: 0.75 };
pub const DEFAULT_LIMIT: usize = 8;
pub(crate) const MAX_LIMIT: usize = 50;

/// What a hit stands for.
#[derive(Debug, Clone, PartialEq)]
pub enum DocKind {
    /// A configured server with no cached or live tools: `mcp_prepare` it first.
    Stub,
    /// A tool known only from the cache (not callable until prepared).
    Cached,
    /// A registered, callable tool.
    Live { wrapped: String },
}

#[derive(Debug, Clone, PartialEq)]
pub struct SearchDoc {
    pub server: String,
    pub(crate) server_display: String,
    pub(crate) server_description: String,
    pub kind: DocKind,
    /// Original tool name (empty for server entries).
    pub tool: String,
    pub(crate) description: String,
    pub(crate) text: String,
}

/// The documents of one configured server: its cached tools, each replaced by (or joined by)
/// the live tool of the same original name, or the server's own entry when it has neither.
pub(crate) fn server_docs(cfg: &ServerConfig, cached: &[CachedTool], live: &[Arc<LiveTool>]) -> Vec<SearchDoc> {
    let mut docs: Vec<SearchDoc> = cached
        .iter()
        .map(|t| {
            SearchDoc::tool(
                &cfg.name,
                &cfg.display_name,
                &cfg.description,
                &t.name,
                t.description.as_deref().unwrap_or(""),
                DocKind::Cached,
            )
        })
        .collect();
    for t in live.iter().filter(|t| t.server == cfg.name) {
        let doc = SearchDoc::tool(
            &cfg.name,
            &cfg.display_name,
            &cfg.description,
            &t.original_name,
            t.raw_description.as_deref().unwrap_or(""),
            DocKind::Live { wrapped: t.name.clone() },
        );
        match docs.iter_mut().find(|d| d.tool == t.original_name) {
            Some(d) => *d = doc,
            None => docs.push(doc),
        }
    }
    if docs.is_empty() {
        docs.push(SearchDoc::server_entry(&cfg.name, &cfg.display_name, &cfg.description));
    }
    docs
}

impl SearchDoc {
    pub(crate) fn server_entry(server: &str, display: &str, description: &str) -> SearchDoc {
        SearchDoc {
            server: server.into(),
            server_display: display.into(),
            server_description: description.into(),
            kind: DocKind::Stub,
            tool: String::new(),
            description: String::new(),
            text: join_non_empty(&[server, display, description]),
        }
    }

    pub fn tool(
        server: &str,
        display: &str,
        server_description: &str,
        tool: &str,
        description: &str,
        kind: DocKind,
    ) -> SearchDoc {
        let split = camel_words(tool).join(" ");
        SearchDoc {
            server: server.into(),
            server_display: display.into(),
            server_description: server_description.into(),
            kind,
            tool: tool.into(),
            description: description.into(),
            text: join_non_empty(&[display, server_description, tool, &split, description]),
        }
    }
}

fn join_non_empty(parts: &[&str]) -> String {
    parts.iter().filter(|p| !p.is_empty()).copied().collect::<Vec<_>>().join(" ")
}

/// Lower-cased words of an identifier split on non-alphanumerics and camelCase boundaries.
fn camel_words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_ascii_alphanumeric()).flat_map(split_camel).map(|w| w.to_ascii_lowercase()).collect()
}

/// Splits at lower->Upper and before the last capital of an upper run followed by a lower
/// (`HTTPServer` -> `HTTP`, `Server`); digits never start a new word.
fn split_camel(part: &str) -> Vec<&str> {
    let b = part.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..b.len() {
        let lower_upper = b[i - 1].is_ascii_lowercase() && b[i].is_ascii_uppercase();
        let acronym_end = b[i - 1].is_ascii_uppercase()
            && b[i].is_ascii_uppercase()
            && b.get(i + 1).is_some_and(|c| c.is_ascii_lowercase());
        if lower_upper || acronym_end {
            out.push(&part[start..i]);
            start = i;
        }
    }
    if start < part.len() {
        out.push(&part[start..]);
    }
    out
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
        | 0xF900..=0xFAFF | 0x3000..=0x303F | 0x3040..=0x309F | 0x30A0..=0x30FF | 0xFF00..=0xFFEF)
}

/// ASCII tokens (length >= 2, lower case) followed by CJK bigrams.
pub(crate) fn tokenize(text: &str) -> Vec<String> {
    let mut tokens: Vec<String> = text
        .split(|c: char| !c.is_ascii_alphanumeric())
        .flat_map(split_camel)
        .filter(|w| w.len() >= 2)
        .map(|w| w.to_ascii_lowercase())
        .collect();
    let mut run: Vec<char> = Vec::new();
    let flush = |run: &mut Vec<char>, tokens: &mut Vec<String>| {
        if run.len() >= 2 {
            tokens.extend(run.windows(2).map(|w| w.iter().collect::<String>()));
        }
        run.clear();
    };
    for c in text.chars() {
        if is_cjk(c) {
            run.push(c);
        } else {
            flush(&mut run, &mut tokens);
        }
    }
    flush(&mut run, &mut tokens);
    tokens
}

/// The BM25 index of `tool_search` over a fixed document list.
pub struct SearchIndex {
    docs: Vec<SearchDoc>,
    index: Index,
}

impl SearchIndex {
    pub fn build(docs: Vec<SearchDoc>) -> SearchIndex {
        let index = Index::build(PARAMS, docs.iter().map(|d| tokenize(&d.text)));
        SearchIndex { docs, index }
    }

    #[cfg(test)]
    pub(crate) fn docs(&self) -> &[SearchDoc] {
        &self.docs
    }

    pub fn len(&self) -> usize {
        self.docs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// Documents with a positive score, best first, ties in document order, at most `limit`
    /// (clamped to 1..=50).
    pub fn search(&self, query: &str, limit: usize) -> Vec<(&SearchDoc, f64)> {
        let hits = self.index.score(&tokenize(query)).ranked(limit.clamp(1, MAX_LIMIT));
        hits.into_iter().map(|(d, s)| (&self.docs[d], s)).collect()
    }
}

/// The markdown answer of `tool_search`. `activated` lists live tools this search activated.
pub fn render(query: &str, hits: &[(&SearchDoc, f64)], activated: &[String]) -> String {
    if hits.is_empty() {
        return format!("No tools found for '{query}'. Try different keywords.");
    }
    let mut out = format!("## Search results: {query}\n\n");
    for (doc, _) in hits {
        match &doc.kind {
            DocKind::Stub => {
                if doc.server_description.is_empty() {
                    out.push_str(&format!("### {}\n", doc.server_display));
                } else {
                    out.push_str(&format!("### {}: {}\n", doc.server_display, doc.server_description));
                }
                out.push_str(&format!(
                    "MCP server '{}' is configured but not connected; call mcp_prepare(server_name=\"{}\") to connect it and activate its tools.\n\n",
                    doc.server, doc.server
                ));
            }
            DocKind::Cached => {
                let desc = if doc.description.is_empty() { "(no description)" } else { &doc.description };
                out.push_str(&format!("- **{}**: {desc}\n", doc.tool));
                out.push_str(&format!(
                    "  (requiresPreparation; call mcp_prepare(server_name=\"{}\") first)\n",
                    doc.server
                ));
            }
            DocKind::Live { wrapped } => {
                let desc = if doc.description.is_empty() { doc.tool.as_str() } else { &doc.description };
                out.push_str(&format!("- **{wrapped}**: {desc}\n"));
            }
        }
    }
    if !activated.is_empty() {
        while !out.ends_with("\n\n") {
            out.push('\n');
        }
        out.push_str(&format!("✅ **{} tools activated; directly callable in this session:**\n", activated.len()));
        for n in activated {
            out.push_str(&format!("  - {n}\n"));
        }
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_splits_camel_snake_and_cjk() {
        assert_eq!(tokenize("getWeatherForecast"), vec!["get", "weather", "forecast"]);
        assert_eq!(tokenize("HTTPServer read_file x"), vec!["http", "server", "read", "file"]);
        assert_eq!(tokenize("v2Api get-sum"), vec!["v2api", "get", "sum"]);
        assert_eq!(tokenize("查询天气 a 字"), vec!["查询", "询天", "天气"]);
        assert_eq!(tokenize("weather天气"), vec!["weather", "天气"]);
    }

    fn docs() -> Vec<SearchDoc> {
        vec![
            SearchDoc::tool(
                "weather",
                "Weather",
                "Forecasts",
                "getForecast",
                "Get the weather forecast for a city",
                DocKind::Live { wrapped: "mcp_weather_getForecast".into() },
            ),
            SearchDoc::tool("files", "Files", "", "read_file", "Read a file from disk", DocKind::Cached),
            SearchDoc::server_entry("github", "GitHub", "Issues and pull requests"),
            SearchDoc::tool("maps", "地图", "查询地点", "geocode", "地址转坐标", DocKind::Cached),
        ]
    }

    #[test]
    fn bm25_ranks_the_matching_document_first() {
        let idx = SearchIndex::build(docs());
        let hits = idx.search("weather forecast", 8);
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].0.server, "weather");
        assert_eq!(idx.search("read file", 8)[0].0.tool, "read_file");
        assert_eq!(idx.search("pull requests", 8)[0].0.kind, DocKind::Stub);
        assert_eq!(idx.search("查询", 8)[0].0.server, "maps");
        assert!(idx.search("zzz", 8).is_empty());
    }

    #[test]
    fn bm25_score_matches_the_formula() {
        // Two docs: "alpha beta" and "alpha". Query "beta": df=1, N=2.
        let d = |t: &str| SearchDoc { text: t.into(), ..SearchDoc::server_entry("s", "", "") };
        let idx = SearchIndex::build(vec![d("alpha beta"), d("alpha")]);
        let hits = idx.search("beta", 8);
        let idf = ((2.0 - 1.0 + 0.5) / (1.0 + 0.5) + 1.0f64).ln();
        let avgdl = 1.5;
        let want = idf * (1.0 * 2.5) / (1.0 + 1.5 * (1.0 - 0.75 + 0.75 * 2.0 / avgdl));
        assert_eq!(hits.len(), 1);
        assert!((hits[0].1 - want).abs() < 1e-12);
        // Ties keep document order; duplicate query tokens count twice.
        let tie = SearchIndex::build(vec![d("gamma"), d("gamma")]);
        let h = tie.search("gamma gamma", 8);
        assert!(std::ptr::eq(h[0].0, &tie.docs()[0]));
        assert!((h[0].1 - 2.0 * tie.search("gamma", 8)[0].1).abs() < 1e-12);
    }

    #[test]
    fn renders_every_kind_and_the_activation_footer() {
        let idx = SearchIndex::build(docs());
        let mut hits = idx.search("weather forecast", 8);
        hits.extend(idx.search("read file", 1));
        hits.extend(idx.search("github", 1));
        let text = render("q", &hits, &["mcp_weather_getForecast".to_string()]);
        assert_eq!(
            text,
            "## Search results: q\n\n\
             - **mcp_weather_getForecast**: Get the weather forecast for a city\n\
             - **read_file**: Read a file from disk\n  (requiresPreparation; call mcp_prepare(server_name=\"files\") first)\n\
             ### GitHub: Issues and pull requests\n\
             MCP server 'github' is configured but not connected; call mcp_prepare(server_name=\"github\") to connect it and activate its tools.\n\n\
             ✅ **1 tools activated; directly callable in this session:**\n  - mcp_weather_getForecast"
        );
        assert_eq!(render("zz", &[], &[]), "No tools found for 'zz'. Try different keywords.");
    }

    /// Rankings and scores of a fixed corpus as `tool_search`'s own BM25 gave them before the
    /// scorer was shared with the skills catalog (printed to 12 decimals then).
    #[test]
    fn a_fixed_corpus_ranks_as_before() {
        let idx = SearchIndex::build(vec![
            SearchDoc::tool(
                "weather",
                "Weather",
                "Forecasts",
                "getForecast",
                "Get the weather forecast for a city",
                DocKind::Cached,
            ),
            SearchDoc::tool("weather", "Weather", "Forecasts", "getAlerts", "Severe weather alerts", DocKind::Cached),
            SearchDoc::tool("files", "Files", "", "read_file", "Read a file from disk", DocKind::Cached),
            SearchDoc::tool("files", "Files", "", "write_file", "Write a file to disk", DocKind::Cached),
            SearchDoc::server_entry("github", "GitHub", "Issues and pull requests"),
            SearchDoc::tool("maps", "地图", "查询地点", "geocode", "地址转坐标", DocKind::Cached),
        ]);
        let cases: &[(&str, &[(&str, f64)])] = &[
            ("weather", &[("weather/getAlerts", 1.487966125475), ("weather/getForecast", 1.347165592573)]),
            ("weather forecast", &[("weather/getForecast", 3.743413434047), ("weather/getAlerts", 1.487966125475)]),
            ("file", &[("files/read_file", 1.731492112977), ("files/write_file", 1.731492112977)]),
            ("read file disk", &[("files/read_file", 5.368467477183), ("files/write_file", 2.777929270185)]),
            ("pull requests", &[("github/", 3.471425444388)]),
            ("查询地址", &[("maps/geocode", 4.477418112096)]),
            ("HTTPServer", &[]),
            ("nothing", &[]),
        ];
        for (q, want) in cases {
            let got: Vec<(String, f64)> =
                idx.search(q, 8).into_iter().map(|(d, s)| (format!("{}/{}", d.server, d.tool), s)).collect();
            assert_eq!(
                got.iter().map(|h| h.0.as_str()).collect::<Vec<_>>(),
                want.iter().map(|w| w.0).collect::<Vec<_>>(),
                "{q}"
            );
            for (g, w) in got.iter().zip(want.iter()) {
                assert!((g.1 - w.1).abs() < 1e-11, "{q}: {} scored {} (was {})", g.0, g.1, w.1);
            }
        }
    }
}
