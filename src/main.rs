//! The `cashcode` binary: parse configuration, run the server, map errors to an exit code.

use std::process::ExitCode;

use cashcode::config::{self, Command};

fn main() -> ExitCode {
    // Before anything else, in this order (src/startup.rs says why each step is there).
    let secrets = cashcode::startup::prepare_process();
    // `cashcode eval locomo FILE`: the recall benchmark (docs/search.md §7), no server.
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("eval") {
        return match cashcode::search::eval::run(&args[1..]) {
            Ok(report) => {
                print!("{report}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("cashcode: {}", e.trim_end());
                ExitCode::from(2)
            }
        };
    }
    // `cashcode acp [flags]`: the editor bridge, reading the same flags as the server.
    let acp = args.first().is_some_and(|a| a == "acp");
    if acp {
        args.remove(0);
    }
    match config::from_args_env(args.clone(), secrets) {
        Ok(Command::Help) => {
            print!("{}", config::HELP);
            ExitCode::SUCCESS
        }
        Ok(Command::Version) => {
            // The build's optional features too: `--no-default-features` builds refuse https://.
            let features: Vec<&str> = [(cfg!(feature = "tls"), "tls"), (cfg!(feature = "oauth"), "oauth")]
                .into_iter()
                .filter_map(|(on, name)| on.then_some(name))
                .collect();
            let features = if features.is_empty() { "none".to_string() } else { features.join(", ") };
            println!("cashcode {} (features: {features})", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Ok(Command::Run(cfg)) if acp => match cashcode::acp::run(&cfg, &args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cashcode acp: {e}");
                ExitCode::FAILURE
            }
        },
        Ok(Command::Run(cfg)) => match cashcode::app::run(*cfg) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cashcode: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("cashcode: {e}");
            ExitCode::from(2)
        }
    }
}
