//! Serves the built web client (client/dist) at `/`: files by path, `index.html` for client
//! routes, long caching for hashed assets. Never leaves the client directory. Only paths the
//! gate classified as static reach it, so nothing that reads as `/api…` falls back to
//! `index.html`.

use std::path::{Component, Path, PathBuf};

use super::Resp;

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
pub(crate) fn serve(dir: Option<&Path>, method: &str, segments: &[String]) -> Resp {
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
    match std::fs::read(&path) {
        Ok(body) => {
            let mut r = Resp { status: 200, content_type: content_type(&path), body, headers: Vec::new() };
            let cache = if is_asset { "public, max-age=31536000, immutable" } else { "no-cache" };
            r.headers.push(("Cache-Control".into(), cache.into()));
            r
        }
        Err(_) => Resp::detail(404, "Not Found"),
    }
}
