//! The `cashcode` binary: parse configuration, run the server, map errors to an exit code.

use std::process::ExitCode;

fn main() -> ExitCode {
    match cashcode::config::from_args_env(std::env::args().skip(1)) {
        Ok(cashcode::config::Command::Help) => {
            print!("{}", cashcode::config::HELP);
            ExitCode::SUCCESS
        }
        Ok(cashcode::config::Command::Version) => {
            println!("cashcode {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Ok(cashcode::config::Command::Run(_config)) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cashcode: {e}");
            ExitCode::from(2)
        }
    }
}
