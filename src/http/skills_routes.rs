//! `/api/skills…` and `/api/skill-evolution…` (http-api.md §7–§8): request shapes checked
//! into pydantic-style 422 lists, the multipart ZIP upload, and one mapping from
//! [`SkillError`] to status + `{"detail"}`. Handlers run on the `http` thread (the import on
//! an `http-slow` thread); all file work is in `crate::skills`.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::api::{only, Api};
use super::{Req, Resp};
use crate::skills::import::MAX_ARCHIVE_BYTES;
use crate::skills::service::{CreateRequest, ListQuery, ReplaceRequest};
use crate::skills::{SkillError, Source};

pub fn route(api: &Api, m: &str, rest: &[&str], req: &Req) -> Resp {
    match rest {
        [] => match m {
            "GET" => list(api, req),
            "POST" => create(api, req),
            _ => Resp::detail(405, "Method Not Allowed"),
        },
        ["import"] if m == "POST" => import(api, req),
        ["invalid", source, dir] if m == "DELETE" => {
            result(api.skills.delete_invalid(source, dir).map(|v| Resp::ok(&v)))
        }
        [name] => match m {
            "GET" => result(api.skills.detail(name).map(|v| Resp::ok(&v))),
            "PUT" => replace(api, name, req),
            "DELETE" => result(api.skills.delete(name).map(|()| Resp::no_content())),
            _ => Resp::detail(405, "Method Not Allowed"),
        },
        [name, "content"] => {
            only(m, &["GET"]).unwrap_or_else(|| result(api.skills.content(name).map(|v| Resp::ok(&v))))
        }
        [name, "versions"] => only(m, &["GET"]).unwrap_or_else(|| {
            result(api.skills.versions(name).map(|v| Resp::ok(&json!({"name": name, "versions": v}))))
        }),
        [name, "validate"] => {
            only(m, &["POST"]).unwrap_or_else(|| result(api.skills.validate(name).map(|v| Resp::ok(&v))))
        }
        [name, "enabled"] => only(m, &["PATCH"]).unwrap_or_else(|| set_enabled(api, name, req)),
        [name, "rollback", version] => only(m, &["POST"])
            .unwrap_or_else(|| result(api.skills.rollback(name, version).map(|r| Resp::ok(&r.to_json(true))))),
        _ => Resp::detail(404, "Not Found"),
    }
}

pub fn route_evolution(api: &Api, m: &str, rest: &[&str]) -> Resp {
    let evo = &api.evolution;
    match rest {
        ["proposals"] => only(m, &["GET"]).unwrap_or_else(|| Resp::ok(&evo.list())),
        ["proposals", id] => only(m, &["GET"]).unwrap_or_else(|| result(evo.get(id).map(|v| Resp::ok(&v)))),
        ["proposals", id, "approve"] => {
            only(m, &["POST"]).unwrap_or_else(|| result(evo.approve(id).map(|v| Resp::ok(&v))))
        }
        ["proposals", id, "reject"] => {
            only(m, &["POST"]).unwrap_or_else(|| result(evo.reject(id).map(|v| Resp::ok(&v))))
        }
        _ => Resp::detail(404, "Not Found"),
    }
}

/// The one place skill errors become HTTP.
fn result(r: Result<Resp, SkillError>) -> Resp {
    match r {
        Ok(resp) => resp,
        Err(SkillError::Internal(msg)) => {
            log::error!("event=skills.internal_error error={msg:?}");
            Resp::detail(500, "Skill storage failed")
        }
        Err(e) => Resp::detail(e.status(), e.message()),
    }
}

// ----- request shapes (pydantic-style 422 items) -------------------------------------------

fn item(kind: &str, loc: &[&str], msg: &str, input: Value) -> Value {
    json!({"type": kind, "loc": loc, "msg": msg, "input": input})
}

fn missing(field: &str, body: &Value) -> Value {
    item("missing", &["body", field], "Field required", body.clone())
}

fn body_object(req: &Req) -> Result<(Value, Map<String, Value>), Resp> {
    let v = req.json()?;
    match &v {
        Value::Object(m) => Ok((v.clone(), m.clone())),
        _ => Err(Resp::shape(vec![item(
            "model_attributes_type",
            &["body"],
            "Input should be a valid dictionary or object to extract fields from",
            v.clone(),
        )])),
    }
}

fn string_field(m: &Map<String, Value>, body: &Value, k: &str, errs: &mut Vec<Value>) -> Option<String> {
    match m.get(k) {
        None => {
            errs.push(missing(k, body));
            None
        }
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            errs.push(item("string_type", &["body", k], "Input should be a valid string", other.clone()));
            None
        }
    }
}

fn support_field(m: &Map<String, Value>, errs: &mut Vec<Value>) -> Option<Option<BTreeMap<String, String>>> {
    match m.get("support_files") {
        None | Some(Value::Null) => Some(None),
        Some(Value::Object(files)) => {
            let mut out = BTreeMap::new();
            for (k, v) in files {
                match v {
                    Value::String(s) => {
                        out.insert(k.clone(), s.clone());
                    }
                    other => {
                        errs.push(item(
                            "string_type",
                            &["body", "support_files", k],
                            "Input should be a valid string",
                            other.clone(),
                        ));
                        return None;
                    }
                }
            }
            Some(Some(out))
        }
        Some(other) => {
            errs.push(item(
                "dict_type",
                &["body", "support_files"],
                "Input should be a valid dictionary",
                other.clone(),
            ));
            None
        }
    }
}

fn bool_field(
    m: &Map<String, Value>,
    body: &Value,
    k: &str,
    default: Option<bool>,
    errs: &mut Vec<Value>,
) -> Option<bool> {
    match m.get(k) {
        None => {
            if default.is_none() {
                errs.push(missing(k, body));
            }
            default
        }
        Some(Value::Bool(b)) => Some(*b),
        Some(other) => match other.as_str().and_then(parse_bool).or(other.as_i64().and_then(|n| match n {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        })) {
            Some(b) => Some(b),
            None => {
                errs.push(item("bool_type", &["body", k], "Input should be a valid boolean", other.clone()));
                None
            }
        },
    }
}

/// Pydantic's lax boolean strings.
fn parse_bool(s: &str) -> Option<bool> {
    match s.trim().to_lowercase().as_str() {
        "true" | "1" | "yes" | "on" | "t" | "y" => Some(true),
        "false" | "0" | "no" | "off" | "f" | "n" => Some(false),
        _ => None,
    }
}

// ----- handlers -------------------------------------------------------------------------

fn list(api: &Api, req: &Req) -> Resp {
    let mut errs = Vec::new();
    let mut q = ListQuery {
        source: req.query_param("source"),
        availability: req.query_param("availability"),
        query: req.query_param("query"),
        ..Default::default()
    };
    if let Some(e) = req.query_param("enabled") {
        match parse_bool(&e) {
            Some(b) => q.enabled = Some(b),
            None => errs.push(item(
                "bool_parsing",
                &["query", "enabled"],
                "Input should be a valid boolean, unable to interpret input",
                json!(e),
            )),
        }
    }
    for (key, min, max) in [("page", 1i64, i64::MAX), ("page_size", 1, 200)] {
        let Some(raw) = req.query_param(key) else { continue };
        match raw.trim().parse::<i64>() {
            Err(_) => errs.push(item(
                "int_parsing",
                &["query", key],
                "Input should be a valid integer, unable to parse string as an integer",
                json!(raw),
            )),
            Ok(n) if n < min => errs.push(json!({"type": "greater_than_equal", "loc": ["query", key],
                "msg": format!("Input should be greater than or equal to {min}"), "input": raw, "ctx": {"ge": min}})),
            Ok(n) if n > max => errs.push(json!({"type": "less_than_equal", "loc": ["query", key],
                "msg": format!("Input should be less than or equal to {max}"), "input": raw, "ctx": {"le": max}})),
            Ok(n) => {
                if key == "page" {
                    q.page = n as usize;
                } else {
                    q.page_size = n as usize;
                }
            }
        }
    }
    if !errs.is_empty() {
        return Resp::shape(errs);
    }
    Resp::ok(&api.skills.list(&q))
}

fn create(api: &Api, req: &Req) -> Resp {
    let (body, m) = match body_object(req) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let mut errs = Vec::new();
    let name = string_field(&m, &body, "name", &mut errs);
    let content = string_field(&m, &body, "content", &mut errs);
    let source = match m.get("source") {
        None => Some(Source::User),
        Some(v) => match v.as_str().and_then(Source::parse) {
            Some(s) => Some(s),
            None => {
                errs.push(item(
                    "literal_error",
                    &["body", "source"],
                    "Input should be 'user', 'agent' or 'builtin'",
                    v.clone(),
                ));
                None
            }
        },
    };
    let support = support_field(&m, &mut errs);
    let enabled = bool_field(&m, &body, "enabled", Some(true), &mut errs);
    let (Some(name), Some(content), Some(source), Some(support), Some(enabled), true) =
        (name, content, source, support, enabled, errs.is_empty())
    else {
        return Resp::shape(errs);
    };
    let created = api.skills.create(CreateRequest {
        name,
        content,
        source,
        support_files: support.unwrap_or_default(),
        enabled,
        reason: None,
    });
    result(created.map(|r| Resp::json(201, &r.to_json(true))))
}

fn replace(api: &Api, name: &str, req: &Req) -> Resp {
    let (body, m) = match body_object(req) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let mut errs = Vec::new();
    let content = string_field(&m, &body, "content", &mut errs);
    let support = support_field(&m, &mut errs);
    let expected = match m.get("expected_hash") {
        None | Some(Value::Null) => Some(None),
        Some(Value::String(s)) => Some(Some(s.clone())),
        Some(other) => {
            errs.push(item("string_type", &["body", "expected_hash"], "Input should be a valid string", other.clone()));
            None
        }
    };
    let (Some(content), Some(support_files), Some(expected_hash), true) = (content, support, expected, errs.is_empty())
    else {
        return Resp::shape(errs);
    };
    let replaced =
        api.skills.replace(name, ReplaceRequest { content, support_files, expected_hash, agent_only: false });
    result(replaced.map(|(r, snapshot)| {
        let mut v = r.to_json(true);
        v["snapshot"] = json!(snapshot);
        Resp::ok(&v)
    }))
}

fn set_enabled(api: &Api, name: &str, req: &Req) -> Resp {
    let (body, m) = match body_object(req) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let mut errs = Vec::new();
    let Some(enabled) = bool_field(&m, &body, "enabled", None, &mut errs) else {
        return Resp::shape(errs);
    };
    result(api.skills.set_enabled(name, enabled).map(|r| Resp::ok(&r.to_json(true))))
}

fn import(api: &Api, req: &Req) -> Resp {
    let ct = req.header("content-type").unwrap_or("");
    let file = multipart_file(ct, &req.body, "file");
    let Some((filename, data)) = file else {
        return Resp::shape(vec![item("missing", &["body", "file"], "Field required", Value::Null)]);
    };
    if !filename.trim().to_lowercase().ends_with(".zip") {
        return Resp::detail(422, "Skill package must be a .zip file");
    }
    if data.len() > MAX_ARCHIVE_BYTES {
        return Resp::detail(422, "Skill ZIP is too large");
    }
    result(api.skills.import_zip(data).map(|r| Resp::json(201, &r.to_json(false))))
}

/// The first part named `field` of a `multipart/form-data` body: `(filename, bytes)`.
/// A part without a filename is not a file upload.
pub fn multipart_file<'a>(content_type: &str, body: &'a [u8], field: &str) -> Option<(String, &'a [u8])> {
    let (mime, params) = content_type.split_once(';')?;
    if !mime.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    let boundary = params.split(';').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim().eq_ignore_ascii_case("boundary").then(|| v.trim().trim_matches('"').to_string())
    })?;
    if boundary.is_empty() || boundary.len() > 200 {
        return None;
    }
    let delim = format!("--{boundary}");
    let delim = delim.as_bytes();
    let mut pos = find(body, delim, 0)?;
    loop {
        let start = pos + delim.len();
        if body[start..].starts_with(b"--") {
            return None;
        }
        let headers_start = start + if body[start..].starts_with(b"\r\n") { 2 } else { 0 };
        let headers_end = find(body, b"\r\n\r\n", headers_start)?;
        let content_start = headers_end + 4;
        let next = find(body, delim, content_start)?;
        // The part's content ends before the CRLF that precedes the next delimiter.
        let content_end = if next >= 2 && &body[next - 2..next] == b"\r\n" { next - 2 } else { next };
        let headers = String::from_utf8_lossy(&body[headers_start..headers_end]);
        let disposition =
            headers.split("\r\n").find(|l| l.to_ascii_lowercase().starts_with("content-disposition:")).unwrap_or("");
        if disposition_param(disposition, "name").as_deref() == Some(field) {
            if let Some(filename) = disposition_param(disposition, "filename") {
                return Some((filename, &body[content_start..content_end.max(content_start)]));
            }
        }
        pos = next;
    }
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if from > hay.len() || needle.is_empty() {
        return None;
    }
    hay[from..].windows(needle.len()).position(|w| w == needle).map(|i| i + from)
}

/// `name="value"` (or unquoted) from a Content-Disposition header line.
fn disposition_param(line: &str, key: &str) -> Option<String> {
    line.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        if !k.trim().eq_ignore_ascii_case(key) {
            return None;
        }
        let v = v.trim();
        Some(v.strip_prefix('"').and_then(|x| x.strip_suffix('"')).unwrap_or(v).to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skills::import::tests::build;
    use crate::skills::package::tests::skill_md;

    struct Harness {
        home: std::path::PathBuf,
        server: Option<crate::app::Server>,
    }

    impl Harness {
        fn new(tag: &str) -> Harness {
            let home = std::env::temp_dir().join(format!("cc-skill-routes-{tag}-{}", crate::util::rand::hex(6)));
            let server = crate::app::start(crate::config::Config::for_home(&home)).expect("server starts");
            Harness { home, server: Some(server) }
        }

        fn call(&self, method: &str, path: &str, body: Value) -> (u16, Value) {
            let body = if body.is_null() { Vec::new() } else { serde_json::to_vec(&body).unwrap() };
            self.raw(method, path, vec![("content-type".into(), "application/json".into())], body)
        }

        fn raw(&self, method: &str, path: &str, headers: Vec<(String, String)>, body: Vec<u8>) -> (u16, Value) {
            let (p, q) = path.split_once('?').unwrap_or((path, ""));
            let req = Req {
                method: method.into(),
                path: p.into(),
                target: super::super::gate::classify(p),
                query: q.into(),
                headers,
                body,
            };
            let resp = self.server.as_ref().unwrap().api().route(&req);
            let v = if resp.body.is_empty() { Value::Null } else { serde_json::from_slice(&resp.body).unwrap() };
            (resp.status, v)
        }

        fn upload(&self, filename: &str, data: &[u8]) -> (u16, Value) {
            let mut body = Vec::new();
            body.extend_from_slice(b"--XyZ\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhello\r\n");
            body.extend_from_slice(
                format!("--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\nContent-Type: application/zip\r\n\r\n").as_bytes(),
            );
            body.extend_from_slice(data);
            body.extend_from_slice(b"\r\n--XyZ--\r\n");
            self.raw(
                "POST",
                "/api/skills/import",
                vec![("content-type".into(), "multipart/form-data; boundary=XyZ".into())],
                body,
            )
        }
    }

    impl Drop for Harness {
        fn drop(&mut self) {
            if let Some(s) = self.server.take() {
                s.stop();
            }
            let _ = std::fs::remove_dir_all(&self.home);
        }
    }

    #[test]
    fn multipart_parser_finds_the_file_part() {
        let body =
            b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.zip\"\r\n\r\nPK\x03\x04\r\n--b--\r\n";
        let (name, data) = multipart_file("multipart/form-data; boundary=b", body, "file").unwrap();
        assert_eq!((name.as_str(), data), ("a.zip", &b"PK\x03\x04"[..]));
        assert!(multipart_file("application/json", body, "file").is_none());
        assert!(multipart_file("multipart/form-data; boundary=b", body, "other").is_none());
        assert!(multipart_file("multipart/form-data; boundary=b", b"--b\r\ngarbage", "file").is_none());
        let no_filename = b"--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nx\r\n--b--";
        assert!(multipart_file("multipart/form-data; boundary=\"b\"", no_filename, "file").is_none());
    }

    #[test]
    fn crud_versions_rollback_and_errors_over_http() {
        let h = Harness::new("crud");
        let (s, v) = h.call("GET", "/api/skills", Value::Null);
        assert_eq!(s, 200);
        assert_eq!(v["total"], 4);
        assert_eq!(v["page_size"], 50);
        assert_eq!(v["invalid"], json!({}));

        let (s, v) = h.call("POST", "/api/skills", json!({"name": "demo", "content": skill_md("demo", "")}));
        assert_eq!(s, 201, "{v}");
        assert_eq!(v["source"], "user");
        assert!(v["path"].is_string());
        let (s, v) = h.call("POST", "/api/skills", json!({"name": "demo", "content": skill_md("demo", "")}));
        assert_eq!((s, v["detail"].as_str()), (409, Some("Skill already exists in user: demo")));
        let (s, v) =
            h.call("POST", "/api/skills", json!({"name": "x", "content": skill_md("x", ""), "source": "builtin"}));
        assert_eq!((s, v["detail"].as_str()), (403, Some("built-in Skills are read-only")));
        let (s, v) = h.call("POST", "/api/skills", json!({"content": 5, "source": "nope"}));
        assert_eq!(s, 422);
        let locs: Vec<String> = v["detail"].as_array().unwrap().iter().map(|i| i["loc"].to_string()).collect();
        assert_eq!(locs, [r#"["body","name"]"#, r#"["body","content"]"#, r#"["body","source"]"#]);
        let (s, v) = h.call("POST", "/api/skills", json!({"name": "Bad", "content": "x"}));
        assert_eq!((s, v["detail"].as_str()), (422, Some(crate::skills::INVALID_NAME)));

        let (s, c) = h.call("GET", "/api/skills/demo/content", Value::Null);
        assert_eq!(s, 200);
        let hash = c["hash"].as_str().unwrap().to_string();
        let (s, v) = h.call(
            "PUT",
            "/api/skills/demo",
            json!({"content": skill_md("demo", "version: 2\n"), "expected_hash": "stale"}),
        );
        assert_eq!((s, v["detail"].as_str()), (409, Some("Skill content changed since it was read")));
        let (s, v) =
            h.call("PUT", "/api/skills/demo", json!({"content": skill_md("other", ""), "expected_hash": hash}));
        assert_eq!((s, v["detail"].as_str()), (422, Some("frontmatter name must match the package directory")));
        let (s, v) = h.call(
            "PUT",
            "/api/skills/demo",
            json!({"content": skill_md("demo", "version: 2\n"), "expected_hash": hash}),
        );
        assert_eq!(s, 200, "{v}");
        let snapshot = v["snapshot"].as_str().unwrap().to_string();
        let (_, v) = h.call("GET", "/api/skills/demo/versions", Value::Null);
        assert_eq!(v, json!({"name": "demo", "versions": [snapshot]}));
        let (s, v) = h.call("POST", &format!("/api/skills/demo/rollback/{snapshot}"), Value::Null);
        assert_eq!((s, v["version"].as_u64()), (200, Some(1)));
        assert!(v.get("snapshot").is_none());
        let (s, v) = h.call("POST", "/api/skills/demo/rollback/nope-1", Value::Null);
        assert_eq!((s, v["detail"].as_str()), (404, Some("snapshot not found: nope-1")));
        // A dot segment never reaches the handler (the gate answers 400); a version that only
        // contains dots is the handler's to refuse.
        let (s, _) = h.call("POST", "/api/skills/demo/rollback/..", Value::Null);
        assert_eq!(s, 400);
        let (s, _) = h.call("POST", "/api/skills/demo/rollback/..x", Value::Null);
        assert_eq!(s, 422);

        let (s, v) = h.call("PATCH", "/api/skills/demo/enabled", json!({"enabled": false}));
        assert_eq!((s, v["availability"].as_str()), (200, Some("disabled")));
        let (s, v) = h.call("GET", "/api/skills?enabled=true&availability=available", Value::Null);
        assert_eq!(s, 200);
        assert!(!v["items"].as_array().unwrap().iter().any(|i| i["name"] == "demo"));
        let (s, _) = h.call("PATCH", "/api/skills/demo/enabled", json!({}));
        assert_eq!(s, 422);
        let (s, v) = h.call("GET", "/api/skills?page=0&page_size=500&enabled=maybe", Value::Null);
        assert_eq!((s, v["detail"].as_array().map(Vec::len)), (422, Some(3)));

        for (m, p) in [
            ("PUT", "/api/skills/weather"),
            ("PATCH", "/api/skills/weather/enabled"),
            ("DELETE", "/api/skills/weather"),
        ] {
            let body = json!({"content": skill_md("weather", ""), "enabled": false});
            let (s, v) = h.call(m, p, body);
            assert_eq!((s, v["detail"].as_str()), (403, Some("built-in Skills are read-only")), "{m} {p}");
        }
        let (s, v) = h.call("GET", "/api/skills/weather/versions", Value::Null);
        assert_eq!((s, v["versions"].clone()), (200, json!([])));
        let (s, v) = h.call("POST", "/api/skills/weather/validate", Value::Null);
        assert_eq!((s, v["valid"].as_bool()), (200, Some(true)));
        let (s, v) = h.call("GET", "/api/skills/nope", Value::Null);
        assert_eq!((s, v["detail"].as_str()), (404, Some("Skill not found")));
        let (s, v) = h.call("GET", "/api/skills/weather", Value::Null);
        assert_eq!(s, 200);
        assert!(v["body_preview"].as_str().unwrap().starts_with("# Weather"));

        let (s, v) = h.call("DELETE", "/api/skills/demo", Value::Null);
        assert_eq!((s, v), (204, Value::Null));
        let (s, _) = h.call("DELETE", "/api/skills/demo", Value::Null);
        assert_eq!(s, 404);
        let (s, _) = h.call("POST", "/api/skills/demo", Value::Null);
        assert_eq!(s, 405);
    }

    #[test]
    fn import_and_invalid_delete_over_http() {
        let h = Harness::new("import");
        let zip = build(&[("pkg/SKILL.md", skill_md("zipped", "").into_bytes(), 0)]);
        let (s, v) = h.upload("Zipped.ZIP", &zip);
        assert_eq!(s, 201, "{v}");
        assert_eq!((v["name"].as_str(), v["source"].as_str()), (Some("zipped"), Some("user")));
        assert!(v.get("path").is_none());
        let (s, v) = h.upload("again.zip", &zip);
        assert_eq!((s, v["detail"].as_str()), (409, Some("Skill already exists in user: zipped")));
        let (s, v) = h.upload("notes.txt", &zip);
        assert_eq!((s, v["detail"].as_str()), (422, Some("Skill package must be a .zip file")));
        let (s, v) = h.upload("big.zip", &vec![b'P'; MAX_ARCHIVE_BYTES + 1]);
        assert_eq!((s, v["detail"].as_str()), (422, Some("Skill ZIP is too large")));
        let (s, v) = h.upload("evil.zip", &build(&[("../escape/SKILL.md", b"x".to_vec(), 0)]));
        assert_eq!((s, v["detail"].as_str()), (422, Some("archive contains an illegal path")));
        let (s, v) = h.raw("POST", "/api/skills/import", vec![], b"{}".to_vec());
        assert_eq!((s, v["detail"][0]["loc"].clone()), (422, json!(["body", "file"])));
        let user_root = h.home.join("data/skills/user");
        let left: Vec<String> = std::fs::read_dir(&user_root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, ["zipped"], "refused imports leave nothing behind");

        std::fs::create_dir(user_root.join("broken")).unwrap();
        let (_, v) = h.call("POST", "/api/skills", json!({"name": "trigger", "content": skill_md("trigger", "")}));
        assert_eq!(v["name"], "trigger");
        let (_, v) = h.call("GET", "/api/skills", Value::Null);
        assert_eq!(v["invalid"], json!({"user:broken": ["SKILL.md not found"]}));
        // An encoded separator is refused by the gate before the selector check.
        let (s, v) = h.call("DELETE", "/api/skills/invalid/user/nested%2Fbroken", Value::Null);
        assert_eq!(s, 400, "{v}");
        let (s, v) = h.call("DELETE", "/api/skills/invalid/other/broken", Value::Null);
        assert_eq!((s, v["detail"].as_str()), (422, Some("invalid Skill source")));
        let (s, v) = h.call("DELETE", "/api/skills/invalid/user/broken", Value::Null);
        assert_eq!(s, 200, "{v}");
        assert!(v["snapshot"].as_str().unwrap().starts_with("invalid/user/"));
        assert!(!user_root.join("broken").exists());
    }

    #[test]
    fn import_through_the_real_http_listener() {
        let h = Harness::new("socket");
        let port = h.server.as_ref().unwrap().http_port;
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(std::time::Duration::from_secs(20)))
            .build()
            .new_agent();
        let zip = build(&[("SKILL.md", skill_md("over-socket", "display_name: 套接字\n").into_bytes(), 0)]);
        let mut body = b"--bnd\r\nContent-Disposition: form-data; name=\"file\"; filename=\"s.zip\"\r\n\r\n".to_vec();
        body.extend_from_slice(&zip);
        body.extend_from_slice(b"\r\n--bnd--\r\n");
        let mut resp = agent
            .post(&format!("http://127.0.0.1:{port}/api/skills/import"))
            .header("Content-Type", "multipart/form-data; boundary=bnd")
            .send(&body[..])
            .expect("request completes");
        assert_eq!(resp.status().as_u16(), 201);
        let v: Value = serde_json::from_str(&resp.body_mut().read_to_string().unwrap()).unwrap();
        assert_eq!(v["display_name"], "套接字");
        let mut resp = agent
            .get(&format!("http://127.0.0.1:{port}/api/skills?query=%E5%A5%97%E6%8E%A5%E5%AD%97"))
            .call()
            .expect("request completes");
        let v: Value = serde_json::from_str(&resp.body_mut().read_to_string().unwrap()).unwrap();
        assert_eq!(v["items"][0]["name"], "over-socket");
        // A browser on a foreign origin cannot import.
        let resp = agent
            .post(&format!("http://127.0.0.1:{port}/api/skills/import"))
            .header("Origin", "http://evil.example")
            .header("Content-Type", "multipart/form-data; boundary=bnd")
            .send(&body[..])
            .expect("request completes");
        assert_eq!(resp.status().as_u16(), 403);
    }

    #[test]
    fn evolution_routes() {
        let h = Harness::new("evo");
        let (s, v) = h.call("GET", "/api/skill-evolution/proposals", Value::Null);
        assert_eq!((s, v), (200, json!({"enabled": false, "items": []})));
        let (s, v) = h.call("GET", "/api/skill-evolution/proposals/abc", Value::Null);
        assert_eq!((s, v["detail"].as_str()), (404, Some("proposal not found")));
        let (s, _) = h.call("POST", "/api/skill-evolution/proposals/abc/approve", Value::Null);
        assert_eq!(s, 404);
        let (s, _) = h.call("GET", "/api/skill-evolution/proposals/abc/approve", Value::Null);
        assert_eq!(s, 405);
    }
}
