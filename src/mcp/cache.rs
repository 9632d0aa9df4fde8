//! The tool-schema cache `<data>/mcp_cache/<safe>.json` (docs/storage.md §6): what a server listed
//! at its last successful connect, keyed by the transport fingerprint so an edited server
//! never shows another transport's tools. Pure data plus file I/O; run on whichever thread
//! calls the manager.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::client::ToolInfo;
use super::transport::TransportSpec;
use crate::util::{fsx, time};

/// First 16 hex chars of SHA-256 over the canonical runtime JSON (docs/storage.md §6). Headers are
/// not part of it; stdio args are the resolved ones.
pub(crate) fn fingerprint(spec: &TransportSpec) -> String {
    let (command, args, env, url) = match spec {
        TransportSpec::Stdio(s) => (s.command.as_str(), s.args.clone(), s.env.clone(), ""),
        TransportSpec::Sse(h) | TransportSpec::StreamableHttp(h) => ("", Vec::new(), BTreeMap::new(), h.url.as_str()),
    };
    // serde_json's map is ordered by key and writes non-ASCII raw with `,`/`:` separators:
    // exactly Python's json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False).
    let canonical = json!({"args": args, "command": command, "env": env, "url": url}).to_string();
    let digest = Sha256::digest(canonical.as_bytes());
    crate::util::rand::to_hex(&digest)[..16].to_string()
}

/// Cache file name: every char other than ASCII alphanumerics, `_` and `-` becomes `_`.
pub fn cache_path(data_dir: &Path, server: &str) -> PathBuf {
    let safe: String =
        server.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    data_dir.join("mcp_cache").join(format!("{safe}.json"))
}

/// A tool as remembered in the cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CachedTool {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) description: Option<String>,
    #[serde(rename = "inputSchema", default)]
    pub(crate) input_schema: Value,
}

#[derive(Serialize)]
struct CacheFile<'a> {
    transport_fingerprint: &'a str,
    cached_at: String,
    tools: Vec<CachedTool>,
    resources: [(); 0],
    prompts: [(); 0],
}

/// Writes the cache after a successful connect + listing.
pub(crate) fn write_cache(data_dir: &Path, server: &str, fingerprint: &str, tools: &[ToolInfo]) -> std::io::Result<()> {
    let file = CacheFile {
        transport_fingerprint: fingerprint,
        cached_at: time::utc_rfc3339_micros(),
        tools: tools
            .iter()
            .map(|t| CachedTool {
                name: t.name.clone(),
                description: t.description.clone(),
                input_schema: t.input_schema.clone(),
            })
            .collect(),
        resources: [],
        prompts: [],
    };
    let mut text = serde_json::to_string_pretty(&file).map_err(std::io::Error::other)?;
    text.push('\n');
    fsx::write_atomic(&cache_path(data_dir, server), text.as_bytes(), false)
}

/// Cached tools, or `None` when the file is missing, unparsable, not an object, written for
/// another transport fingerprint, or without a `tools` list.
pub(crate) fn read_cache(data_dir: &Path, server: &str, fingerprint: &str) -> Option<Vec<CachedTool>> {
    let text = fsx::read_opt(&cache_path(data_dir, server)).ok()??;
    let v: Value = serde_json::from_str(&text).ok()?;
    let obj = v.as_object()?;
    if obj.get("transport_fingerprint").and_then(Value::as_str) != Some(fingerprint) {
        return None;
    }
    let tools = obj.get("tools")?.as_array()?;
    Some(
        tools
            .iter()
            .filter_map(|t| serde_json::from_value::<CachedTool>(t.clone()).ok())
            .filter(|t| !t.name.is_empty())
            .collect(),
    )
}

/// Removes the cache file (config replaced or deleted); a missing file is fine.
pub(crate) fn delete_cache(data_dir: &Path, server: &str) {
    let p = cache_path(data_dir, server);
    if let Err(e) = std::fs::remove_file(&p) {
        if e.kind() != std::io::ErrorKind::NotFound {
            log::warn!("mcp {server}: cannot delete tool cache: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::transport::HttpSpec;

    fn tmp() -> PathBuf {
        let d = std::env::temp_dir().join(format!("cc-mcp-cache-{}", crate::util::rand::hex(6)));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn fingerprint_matches_the_contract_example() {
        let spec = TransportSpec::Sse(HttpSpec {
            url: "http://127.0.0.1:8090/sse".into(),
            headers: BTreeMap::from([("Authorization".into(), "x".into())]),
        });
        assert_eq!(fingerprint(&spec), "3b505a005abd11ee");
    }

    #[test]
    fn cache_is_used_only_with_a_matching_fingerprint() {
        let data = tmp();
        let tools = vec![ToolInfo {
            name: "say_hello".into(),
            description: Some("Say hello".into()),
            input_schema: json!({"type":"object","properties":{}}),
        }];
        write_cache(&data, "a.b", "0123456789abcdef", &tools).unwrap();
        assert!(cache_path(&data, "a.b").ends_with("mcp_cache/a_b.json"));
        let got = read_cache(&data, "a.b", "0123456789abcdef").unwrap();
        assert_eq!(got[0].name, "say_hello");
        assert_eq!(got[0].input_schema, json!({"type":"object","properties":{}}));
        assert!(read_cache(&data, "a.b", "ffffffffffffffff").is_none());
        std::fs::write(cache_path(&data, "a.b"), "[1]").unwrap();
        assert!(read_cache(&data, "a.b", "0123456789abcdef").is_none());
        delete_cache(&data, "a.b");
        assert!(read_cache(&data, "a.b", "0123456789abcdef").is_none());
        std::fs::remove_dir_all(data).unwrap();
    }
}
