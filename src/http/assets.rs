//! Serves the built web client (client/dist) at `/`: files by path, `index.html` for client
//! routes, long caching for hashed assets. Never leaves the client directory. Only paths the
//! gate classified as static reach it, so nothing that reads as `/api…` falls back to
//! `index.html`. Runs on the `http` thread.
//!
//! Each file is read once and kept ([`Cache`]): a page load costs a `stat` per file, not a
//! read, and every connection writing the bundle shares one copy. A file whose size or
//! modification time changed (a rebuilt client) is read again.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use super::{Body, Resp};

/// Bytes the cache keeps at most. A built client is about 1 MiB; a `client_dir` pointed at
/// something far larger is served from the disk past this, never held whole.
const MAX_CACHED_BYTES: usize = 16 << 20;

/// The client's files as last read, by path.
#[derive(Default)]
pub(crate) struct Cache {
    files: Mutex<HashMap<PathBuf, Cached>>,
}

struct Cached {
    len: u64,
    modified: Option<SystemTime>,
    bytes: Arc<[u8]>,
}

impl Cache {
    /// `path`'s bytes: the kept copy while its size and modification time are unchanged, else
    /// read now (and kept while the cache has room).
    fn read(&self, path: &Path) -> std::io::Result<Body> {
        let meta = std::fs::metadata(path)?;
        let (len, modified) = (meta.len(), meta.modified().ok());
        let files = crate::util::sync::lock(&self.files);
        if let Some(c) = files.get(path).filter(|c| c.len == len && c.modified == modified && modified.is_some()) {
            return Ok(Body::Shared(Arc::clone(&c.bytes)));
        }
        drop(files);
        let bytes: Arc<[u8]> = std::fs::read(path)?.into();
        let mut files = crate::util::sync::lock(&self.files);
        files.remove(path);
        let held: usize = files.values().map(|c| c.bytes.len()).sum();
        if held + bytes.len() <= MAX_CACHED_BYTES {
            files.insert(path.to_path_buf(), Cached { len, modified, bytes: Arc::clone(&bytes) });
        }
        Ok(Body::Shared(bytes))
    }
}

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// `segments` are the gate's decoded segments of a non-API path.
pub(crate) fn serve(cache: &Cache, dir: Option<&Path>, method: &str, segments: &[String]) -> Resp {
    if method != "GET" && method != "HEAD" {
        return Resp::detail(405, "Method Not Allowed");
    }
    let Some(dir) = dir.filter(|d| d.join("index.html").is_file()) else {
        return Resp::detail(404, "Not Found");
    };
    // Only plain segments: no `..`, no absolute parts, no hidden files, no `\` or control
    // characters (which some file systems read as separators or truncate at).
    let mut rel = PathBuf::new();
    for seg in segments {
        let p = Path::new(seg);
        if seg.starts_with('.')
            || seg.contains('\\')
            || seg.chars().any(char::is_control)
            || p.components().count() != 1
            || !matches!(p.components().next(), Some(Component::Normal(_)))
        {
            return Resp::detail(404, "Not Found");
        }
        rel.push(seg);
    }
    let candidate = dir.join(&rel);
    let (path, is_asset) = if !rel.as_os_str().is_empty() && candidate.is_file() {
        (candidate, rel.starts_with("assets"))
    } else if rel.extension().is_some() {
        return Resp::detail(404, "Not Found");
    } else {
        (dir.join("index.html"), false)
    };
    match cache.read(&path) {
        Ok(body) => {
            let mut r = Resp { status: 200, content_type: content_type(&path), body, headers: Vec::new() };
            let cache = if is_asset { "public, max-age=31536000, immutable" } else { "no-cache" };
            r.headers.push(("Cache-Control".into(), cache.into()));
            r
        }
        Err(_) => Resp::detail(404, "Not Found"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(b: Body) -> Arc<[u8]> {
        match b {
            Body::Shared(b) => b,
            Body::Owned(_) => panic!("static files are served from the cache"),
        }
    }

    #[test]
    fn a_file_is_read_once_and_again_only_when_it_changed() {
        let dir = std::env::temp_dir().join(format!("cc-assets-{}", crate::util::rand::hex(6)));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("index.html");
        std::fs::write(&f, "<p>one</p>").unwrap();
        let cache = Cache::default();
        let (a, b) = (shared(cache.read(&f).unwrap()), shared(cache.read(&f).unwrap()));
        assert!(Arc::ptr_eq(&a, &b), "the second request is served from memory");
        assert_eq!(&*a, b"<p>one</p>");
        // A rebuilt client: other size, later modification time.
        std::fs::write(&f, "<p>second</p>").unwrap();
        let c = shared(cache.read(&f).unwrap());
        assert_eq!(&*c, b"<p>second</p>");
        std::fs::remove_file(&f).unwrap();
        assert!(cache.read(&f).is_err(), "a file that went is not served from memory");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn files_past_the_budget_are_served_but_not_kept() {
        let dir = std::env::temp_dir().join(format!("cc-assets-big-{}", crate::util::rand::hex(6)));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("big.js");
        std::fs::write(&f, vec![b'x'; MAX_CACHED_BYTES + 1]).unwrap();
        let cache = Cache::default();
        assert_eq!(shared(cache.read(&f).unwrap()).len(), MAX_CACHED_BYTES + 1);
        assert!(crate::util::sync::lock(&cache.files).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
