//! Skills benchmarks (`cargo bench --bench skills`): catalog scan and `skill_search` with 1,000
//! installed skills, and the import of a ~10 MiB archive. Plain `harness = false` timing with
//! std::time; prints one line per measurement. Without `--bench` (`cargo test --bench skills`, a
//! debug build) each measurement runs once: a smoke run.

// Test code: helpers are `pub` for the other test modules, and an `unwrap` that fails fails the test.
#![allow(unreachable_pub, clippy::unwrap_used)]

use std::fs;
use std::io::{Cursor, Write};
use std::path::PathBuf;
use std::sync::Arc;

#[path = "shared/search.rs"]
mod search;

use cashcode::skills::catalog::DepProbe;
use cashcode::skills::service::SkillService;
use cashcode::skills::tools::{SkillTools, StaticEnv};
use search::{install_skills, time};

fn home() -> PathBuf {
    let d = std::env::temp_dir().join(format!("cc-bench-skills-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).expect("temp dir");
    d
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let iters = |n: u32| if bench { n } else { 1 };
    let data = home();
    let paths = install_skills(&data);
    let mut rng = cashcode::util::prng::Prng::new(42);
    let mut next = || rng.next_u64();
    let probe: Arc<cashcode::skills::service::ProbeFn> = Arc::new(|| DepProbe::base(Default::default()));
    let svc = SkillService::new(paths.clone(), probe).expect("service");
    assert_eq!(svc.catalog().records.len(), 1004);

    time("catalog scan (refresh), 1,004 skills", iters(10), || svc.refresh().expect("refresh"));
    let turn = SkillTools::new(Arc::clone(&svc), Arc::new(StaticEnv(Default::default())));
    time("skill_search 'weather report' (limit 8)", iters(200), || turn.search("weather report", 8));
    time("skill_search '数据分析' (limit 20)", iters(200), || turn.search("数据分析", 20));
    time("GET /api/skills?query=budget (page 1)", iters(200), || {
        svc.list(&cashcode::skills::service::ListQuery { query: Some("budget".into()), ..Default::default() })
    });

    // ~10 MiB archive of incompressible support files (52 x 200,000 bytes).
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    w.start_file("SKILL.md", opts).expect("member");
    w.write_all(b"---\nname: big-import\ndescription: A large archive\n---\n\n# Big\n\nBody.\n").expect("write");
    for i in 0..52 {
        w.start_file(format!("assets/blob-{i:02}.bin"), opts).expect("member");
        let blob: Vec<u8> = (0..200_000).map(|_| next() as u8).collect();
        w.write_all(&blob).expect("write");
    }
    let zip = w.finish().expect("finish").into_inner();
    println!("archive size: {} bytes (limit {})", zip.len(), cashcode::skills::import::MAX_ARCHIVE_BYTES);
    assert!(zip.len() <= cashcode::skills::import::MAX_ARCHIVE_BYTES);
    time("import 10 MiB archive (+ delete)", iters(5), || {
        svc.import_zip(&zip).expect("import");
        svc.delete("big-import").expect("delete");
    });
    let _ = fs::remove_dir_all(&data);
}
