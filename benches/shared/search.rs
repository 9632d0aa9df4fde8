//! Search figures shared by `--bench mcp`, `--bench skills` and the one-command report
//! (`--bench load`): `tool_search` over synthetic MCP tool indexes and a synthetic installed
//! set of 1,000 skills. Deterministic inputs, so runs are comparable.
// Each bench uses part of this file.
#![allow(dead_code)]

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use cashcode::mcp::search::{self, DocKind, SearchDoc, SearchIndex};
use cashcode::skills::service::SkillPaths;

const TOOL_WORDS: &[&str] = &[
    "weather",
    "forecast",
    "github",
    "issue",
    "pull",
    "request",
    "file",
    "read",
    "write",
    "search",
    "query",
    "database",
    "table",
    "row",
    "email",
    "send",
    "calendar",
    "event",
    "create",
    "delete",
    "update",
    "list",
    "image",
    "resize",
    "convert",
    "translate",
    "text",
    "summary",
    "stock",
    "price",
    "map",
    "route",
    "geocode",
    "slack",
    "message",
    "channel",
    "invoice",
    "payment",
    "user",
    "account",
    "deploy",
    "build",
    "log",
    "metric",
];
const CJK: &[&str] = &["天气", "查询", "文件", "搜索", "邮件", "日历", "图片", "翻译", "地图", "股票"];

/// The crate's seeded generator, so runs are comparable.
type Rng = cashcode::util::prng::Prng;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// Prints n, p50, p99 and max of `samples`; returns (p50, p99).
pub fn report(name: &str, mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    println!(
        "{name}: n={} p50={:.3} ms p99={:.3} ms max={:.3} ms",
        samples.len(),
        percentile(&samples, 0.5).as_secs_f64() * 1000.0,
        percentile(&samples, 0.99).as_secs_f64() * 1000.0,
        samples[samples.len() - 1].as_secs_f64() * 1000.0
    );
    (percentile(&samples, 0.5), percentile(&samples, 0.99))
}

/// Indexes `servers` x 50 synthetic tools and times `queries` searches (search + render);
/// prints the figures and returns (p50, p99).
pub fn bench_tool_search(servers: usize, queries: usize) -> (Duration, Duration) {
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let mut docs = Vec::with_capacity(10_000);
    for s in 0..servers {
        let server = format!("server{s}");
        let display = format!("{} {}", *rng.pick(TOOL_WORDS), *rng.pick(TOOL_WORDS));
        let sdesc = format!("Tools for {} and {} {}", *rng.pick(TOOL_WORDS), *rng.pick(TOOL_WORDS), *rng.pick(CJK));
        for t in 0..50 {
            let tool = format!("{}{}{t}", rng.pick(TOOL_WORDS), capitalise(rng.pick::<&str>(TOOL_WORDS)));
            let desc = (0..12).map(|_| *rng.pick(TOOL_WORDS)).collect::<Vec<_>>().join(" ") + " " + *rng.pick(CJK);
            let kind =
                if t % 2 == 0 { DocKind::Live { wrapped: format!("mcp_{server}_{tool}") } } else { DocKind::Cached };
            docs.push(SearchDoc::tool(&server, &display, &sdesc, &tool, &desc, kind));
        }
    }
    let started = Instant::now();
    let index = SearchIndex::build(docs);
    println!("tool_search index build over {} tools: {:.1} ms", index.len(), started.elapsed().as_secs_f64() * 1000.0);
    let queries: Vec<String> = (0..queries)
        .map(|i| match i % 4 {
            0 => rng.pick(TOOL_WORDS).to_string(),
            1 => format!("{} {}", *rng.pick(TOOL_WORDS), *rng.pick(TOOL_WORDS)),
            2 => format!("{} {} {}", *rng.pick(TOOL_WORDS), *rng.pick(CJK), *rng.pick(TOOL_WORDS)),
            _ => format!("{}{}", rng.pick(TOOL_WORDS), capitalise(rng.pick::<&str>(TOOL_WORDS))),
        })
        .collect();
    let mut samples = Vec::with_capacity(queries.len());
    let mut hits = 0;
    for q in &queries {
        let t = Instant::now();
        let found = index.search(q, search::DEFAULT_LIMIT);
        let text = search::render(q, &found, &[]);
        samples.push(t.elapsed());
        hits += found.len() + usize::from(text.is_empty());
    }
    let (p50, p99) =
        report(&format!("tool_search query over {} tools (search + render, limit 8)", index.len()), samples);
    println!("  ({hits} hits returned in total)");
    (p50, p99)
}

fn capitalise(w: &str) -> String {
    let mut c = w.chars();
    c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
}

pub const SKILL_WORDS: &[&str] = &[
    "weather",
    "report",
    "github",
    "chart",
    "invoice",
    "email",
    "summary",
    "translate",
    "calendar",
    "budget",
    "deploy",
    "backup",
    "review",
    "search",
    "recipe",
    "travel",
    "fitness",
    "notes",
    "数据",
    "分析",
];

/// Writes 1,000 user skills (plus the built-ins) under `data`; returns the skill paths.
pub fn install_skills(data: &Path) -> SkillPaths {
    let paths = SkillPaths::under(data);
    cashcode::skills::builtin::install(&paths.builtin).expect("builtins");
    fs::create_dir_all(&paths.user).expect("user root");
    let mut rng = Rng::new(42);
    let mut next = || rng.next_u64();
    for i in 0..1000 {
        let name = format!("skill-{i:04}");
        let dir = paths.user.join(&name);
        fs::create_dir_all(dir.join("references")).expect("pkg dir");
        let tags: Vec<&str> = (0..3).map(|_| SKILL_WORDS[(next() % SKILL_WORDS.len() as u64) as usize]).collect();
        let desc: Vec<&str> = (0..12).map(|_| SKILL_WORDS[(next() % SKILL_WORDS.len() as u64) as usize]).collect();
        let md = format!(
            "---\nname: {name}\ndescription: {}\ntags: [{}]\ntriggers: [{} things]\n---\n\n# {name}\n\n{}\n",
            desc.join(" "),
            tags.join(", "),
            tags[0],
            "Do the steps carefully. ".repeat(40)
        );
        fs::write(dir.join("SKILL.md"), md).expect("SKILL.md");
        fs::write(dir.join("references/r.md"), "reference text").expect("reference");
    }
    paths
}

/// Mean time per call of `f` over `iters` calls; prints one line.
pub fn time<T>(label: &str, iters: u32, mut f: impl FnMut() -> T) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        std::hint::black_box(f());
    }
    let per = start.elapsed() / iters;
    println!("{label:<48} {per:>12.3?} per op ({iters} iters)");
    per
}

/// Installs 1,000 skills under `data` and times `queries` `skill_search` calls (limit 8) over
/// varied queries; prints the figures and returns (p50, p99).
pub fn bench_skill_search(data: &Path, queries: usize) -> (Duration, Duration) {
    use cashcode::skills::catalog::DepProbe;
    use cashcode::skills::service::{ProbeFn, SkillService};
    use cashcode::skills::tools::{SkillTools, StaticEnv};
    use std::sync::Arc;

    let paths = install_skills(data);
    let probe: Arc<ProbeFn> = Arc::new(|| DepProbe::base(Default::default()));
    let svc = SkillService::new(paths, probe).expect("service");
    let tools = SkillTools::new(Arc::clone(&svc), Arc::new(StaticEnv(Default::default())));
    let mut samples = Vec::with_capacity(queries);
    for i in 0..queries {
        let q = match i % 3 {
            0 => SKILL_WORDS[i % SKILL_WORDS.len()].to_string(),
            1 => format!("{} {}", SKILL_WORDS[i % SKILL_WORDS.len()], SKILL_WORDS[(i * 7) % SKILL_WORDS.len()]),
            _ => "数据分析".to_string(),
        };
        let t = Instant::now();
        std::hint::black_box(tools.search(&q, 8));
        samples.push(t.elapsed());
    }
    report(&format!("skill_search over {} skills (limit 8)", svc.catalog().records.len()), samples)
}
