//! Logging: console (stderr, via env_logger's formatter) and `<log dir>/cashcode.log`, with
//! separate levels, every line passed through secret redaction (the known secret values, then
//! the generic shapes), daily rotation to `cashcode.log.YYYY-MM-DD` and retention. The log
//! directory is 0700 and its files 0600. Any thread logs; file writes take a mutex.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use log::{LevelFilter, Log, Metadata, Record};

use crate::secrets::Secrets;
use crate::util::{fsx, redact, sync, time};

struct FileSink {
    dir: PathBuf,
    file: File,
    date: String,
    retention_days: u32,
}

struct Logger {
    secrets: Secrets,
    console: env_logger::Logger,
    console_level: LevelFilter,
    file_level: LevelFilter,
    file: Mutex<FileSink>,
}

/// Installs the logger; fails when the log directory cannot be created or written. `secrets`
/// is the server's live registry of known secret values.
pub(crate) fn init(
    dir: &Path,
    file_level: LevelFilter,
    console_level: LevelFilter,
    retention_days: u32,
    secrets: Secrets,
) -> io::Result<()> {
    fsx::create_private_dirs(dir)?;
    fsx::tighten_dir(dir);
    let file = open_log(&dir.join("cashcode.log"))?;
    let now = time::now_epoch() as i64;
    let sink = FileSink { dir: dir.to_path_buf(), file, date: time::local_date(now), retention_days };
    prune(&sink.dir, sink.retention_days);
    // `Logger::log` hands env_logger records whose message is already clean.
    let console = env_logger::Builder::new()
        .filter_level(console_level)
        .format(|buf, record| writeln!(buf, "{} {:<5} {}", time::minute_stamp(), record.level(), record.args()))
        .build();
    let logger = Logger { secrets, console, console_level, file_level, file: Mutex::new(sink) };
    log::set_max_level(console_level.max(file_level));
    log::set_boxed_logger(Box::new(logger)).map_err(|e| io::Error::other(e.to_string()))
}

impl Log for Logger {
    fn enabled(&self, m: &Metadata) -> bool {
        m.level() <= self.console_level || m.level() <= self.file_level
    }

    fn log(&self, record: &Record) {
        // Only our own crate logs to the file; dependencies stay at warn.
        let ours = record.target().starts_with("cashcode");
        if !ours && record.level() > log::Level::Warn {
            return;
        }
        let to_console = record.level() <= self.console_level;
        let to_file = record.level() <= self.file_level;
        if !to_console && !to_file {
            return;
        }
        // Cleaned once for both sinks.
        let message = clean(&self.secrets, record);
        if to_console {
            self.console.log(
                &Record::builder()
                    .args(format_args!("{message}"))
                    .level(record.level())
                    .target(record.target())
                    .module_path(record.module_path())
                    .file(record.file())
                    .line(record.line())
                    .build(),
            );
        }
        if to_file {
            let now = time::now_epoch();
            let t = time::local(now as i64);
            let line = format!(
                "{}.{:03} {} {:<8} {} {}\n",
                t.ymd_hms(' '),
                (now.fract() * 1000.0) as u32,
                t.offset_str(false),
                record.level().as_str(),
                record.target(),
                message
            );
            let mut sink = sync::lock(&self.file);
            sink.rotate_if_needed(now as i64);
            let _ = sink.file.write_all(line.as_bytes());
        }
    }

    fn flush(&self) {
        let _ = sync::lock(&self.file).file.flush();
    }
}

impl FileSink {
    fn rotate_if_needed(&mut self, now: i64) {
        let today = time::local_date(now);
        if today == self.date {
            return;
        }
        let current = self.dir.join("cashcode.log");
        let archived = self.dir.join(format!("cashcode.log.{}", self.date));
        if fs::rename(&current, &archived).is_ok() {
            if let Ok(f) = open_log(&current) {
                self.file = f;
            }
        }
        self.date = today;
        prune(&self.dir, self.retention_days);
    }
}

/// The message of `record` without known secret values or generic secret shapes.
fn clean(secrets: &Secrets, record: &Record) -> String {
    redact::redact(&secrets.redact(&record.args().to_string()))
}

/// Opens a log file for appending, 0600 (an older, wider file is narrowed).
fn open_log(path: &Path) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.create(true).append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, fsx::FILE_MODE);
    let f = opts.open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = f.set_permissions(fs::Permissions::from_mode(fsx::FILE_MODE));
    }
    Ok(f)
}

/// Keeps today's file plus `retention_days - 1` archives; touches only `cashcode.log.YYYY-MM-DD`.
fn prune(dir: &Path, retention_days: u32) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    let mut archives: Vec<String> = rd
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| {
            n.strip_prefix("cashcode.log.").is_some_and(|d| {
                d.len() == 10
                    && d.bytes().enumerate().all(|(i, b)| if i == 4 || i == 7 { b == b'-' } else { b.is_ascii_digit() })
            })
        })
        .collect();
    archives.sort();
    let keep = retention_days.saturating_sub(1) as usize;
    if archives.len() > keep {
        for name in &archives[..archives.len() - keep] {
            let _ = fs::remove_file(dir.join(name));
        }
    }
}
