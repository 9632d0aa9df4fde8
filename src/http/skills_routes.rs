//! `/api/skills…` and `/api/skill-evolution…` (docs/http-api.md §7–§8): bodies read into their
//! models by the one body extractor ([`super::shape::body`]), the ZIP upload taken from the multipart body
//! ([`super::multipart`]), the typed views of [`crate::skills::views`] as bodies, and one
//! mapping from [`SkillError`] to status + `{"detail"}`. Handlers run on the `http` thread
//! (the import on an `http-slow` thread); all file work is in
//! `crate::skills`.

use serde::Deserialize;

use super::api::{only, Api};
use super::shape::{body, Issue, Query};
use super::{multipart, Req, Resp};
use crate::skills::import::MAX_ARCHIVE_BYTES;
use crate::skills::service::{CreateRequest, ListQuery, ReplaceRequest};
use crate::skills::views::{SkillVersions, SkillView};
use crate::skills::{SkillError, Source};
use crate::util::body::{Choice, Dict, LaxBool, Model, OneOf};

pub(crate) fn route(api: &Api, m: &str, rest: &[&str], req: &Req) -> Resp {
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
            let versions = api.skills.versions(name);
            result(versions.map(|versions| Resp::ok(&SkillVersions { name: name.to_string(), versions })))
        }),
        [name, "validate"] => {
            only(m, &["POST"]).unwrap_or_else(|| result(api.skills.validate(name).map(|v| Resp::ok(&v))))
        }
        [name, "enabled"] => only(m, &["PATCH"]).unwrap_or_else(|| set_enabled(api, name, req)),
        [name, "rollback", version] => only(m, &["POST"]).unwrap_or_else(|| {
            result(api.skills.rollback(name, version).map(|r| Resp::ok(&SkillView::record(&r, true))))
        }),
        _ => Resp::detail(404, "Not Found"),
    }
}

pub(crate) fn route_evolution(api: &Api, m: &str, rest: &[&str]) -> Resp {
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

fn list(api: &Api, req: &Req) -> Resp {
    let mut shape = Query::of(req);
    let enabled = shape.bool("enabled");
    let page = shape.int("page", 1, i64::MAX);
    let page_size = shape.int("page_size", 1, 200);
    if let Err(r) = shape.finish() {
        return r;
    }
    let d = ListQuery::default();
    let q = ListQuery {
        source: req.query_param("source"),
        enabled,
        availability: req.query_param("availability"),
        query: req.query_param("query"),
        page: page.map_or(d.page, |n| n as usize),
        page_size: page_size.map_or(d.page_size, |n| n as usize),
    };
    Resp::ok(&api.skills.list(&q))
}

impl Choice for Source {
    const CHOICES: &'static [&'static str] = &["user", "agent", "builtin"];

    fn parse(s: &str) -> Option<Source> {
        Source::parse(s)
    }
}

/// `POST /api/skills`.
#[derive(Deserialize)]
struct CreateBody {
    name: String,
    content: String,
    /// Absent: `user`.
    source: Option<OneOf<Source>>,
    support_files: Option<Option<Dict<String>>>,
    /// Absent: enabled.
    enabled: Option<LaxBool>,
}

impl Model for CreateBody {}

fn create(api: &Api, req: &Req) -> Resp {
    let b: CreateBody = match body(req) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let created = api.skills.create(CreateRequest {
        name: b.name,
        content: b.content,
        source: b.source.map_or(Source::User, |s| s.0),
        support_files: b.support_files.flatten().map(|d| d.0).unwrap_or_default(),
        enabled: b.enabled.is_none_or(|e| e.0),
        reason: None,
    });
    result(created.map(|r| Resp::json(201, &SkillView::record(&r, true))))
}

/// `PUT /api/skills/{name}`.
#[derive(Deserialize)]
struct ReplaceBody {
    content: String,
    support_files: Option<Option<Dict<String>>>,
    expected_hash: Option<Option<String>>,
}

impl Model for ReplaceBody {}

fn replace(api: &Api, name: &str, req: &Req) -> Resp {
    let b: ReplaceBody = match body(req) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let rq = ReplaceRequest {
        content: b.content,
        support_files: b.support_files.flatten().map(|d| d.0),
        expected_hash: b.expected_hash.flatten(),
        agent_only: false,
    };
    result(api.skills.replace(name, rq).map(|(r, snapshot)| Resp::ok(&SkillView::replaced(&r, snapshot))))
}

/// `PATCH /api/skills/{name}/enabled`.
#[derive(Deserialize)]
struct EnabledBody {
    enabled: LaxBool,
}

impl Model for EnabledBody {}

fn set_enabled(api: &Api, name: &str, req: &Req) -> Resp {
    match body::<EnabledBody>(req) {
        Ok(b) => result(api.skills.set_enabled(name, b.enabled.0).map(|r| Resp::ok(&SkillView::record(&r, true)))),
        Err(r) => r,
    }
}

fn import(api: &Api, req: &Req) -> Resp {
    let ct = req.header("content-type").unwrap_or("");
    let Some((filename, data)) = multipart::file(ct, &req.body, "file") else {
        return Resp::shape(vec![Issue::new("missing", &["body", "file"], "Field required", serde_json::Value::Null)]);
    };
    if !filename.trim().to_lowercase().ends_with(".zip") {
        return Resp::detail(422, "Skill package must be a .zip file");
    }
    if data.len() > MAX_ARCHIVE_BYTES {
        return Resp::detail(422, "Skill ZIP is too large");
    }
    result(api.skills.import_zip(data).map(|r| Resp::json(201, &SkillView::record(&r, false))))
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

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
