//! The Skills HTTP wire byte for byte (docs/http-api.md §7–§8): one full response of every body
//! shape the `/api/skills…` and `/api/skill-evolution…` routes return, and the 422 lists the
//! body extractor (`util::body`) builds for the skills, MCP and sessions routes. Values that change
//! per run (the temp home, snapshot ids, `updated_at`) are masked; everything else, key order
//! included, must match exactly.

use std::io::Write;

use serde_json::json;

use crate::common::*;

const PIN_MD: &str = "---\nname: pin\ndescription: Pinned wire shape\ntags: [b, a]\nrequires:\n  tools: [web_fetch]\n  env: [PIN_UNSET_VAR]\n---\n\n# Pin\n\nBody.\n";

/// Replaces the number after every `"key":` with `0`.
fn mask_number(body: &str, key: &str) -> String {
    let pat = format!("\"{key}\":");
    let mut out = String::new();
    let mut rest = body;
    while let Some(i) = rest.find(&pat) {
        let after = i + pat.len();
        out.push_str(&rest[..after]);
        let tail = &rest[after..];
        let end = tail.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == 'e')).unwrap_or(tail.len());
        out.push('0');
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

#[track_caller]
fn pin(resp: &HttpResp, status: u16, masks: &[(&str, &str)], want: &str) {
    let mut body = resp.body.clone();
    for (from, to) in masks {
        body = body.replace(from, to);
    }
    assert_eq!((resp.status, body.as_str()), (status, want));
}

/// A one-member stored ZIP holding `SKILL.md`.
fn zip_of(md: &str) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    w.start_file("SKILL.md", opts).expect("member");
    w.write_all(md.as_bytes()).expect("write");
    w.finish().expect("finish").into_inner()
}

fn upload(server: &TestServer, filename: &str, data: &[u8]) -> HttpResp {
    let mut body =
        format!("--bnd\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n\r\n").into_bytes();
    body.extend_from_slice(data);
    body.extend_from_slice(b"\r\n--bnd--\r\n");
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).proxy(None).build().into();
    let mut resp = agent
        .post(&format!("{}/api/skills/import", server.http_base()))
        .header("Content-Type", "multipart/form-data; boundary=bnd")
        .send(&body[..])
        .expect("import request completes");
    let status = resp.status().as_u16();
    let body = resp.body_mut().read_to_string().expect("import body");
    HttpResp { status, headers: Vec::new(), body }
}

#[test]
fn skill_record_views_are_byte_identical() {
    let server = TestServer::start();
    let home = server.home.display().to_string();
    let user_root = server.home.join("data/skills/user");
    std::fs::create_dir_all(user_root.join("broken")).expect("invalid package dir");
    let h = [(home.as_str(), "<HOME>")];

    let r = server.post("/api/skills", &json!({"name": "pin", "content": PIN_MD}));
    pin(
        &r,
        201,
        &h,
        r##"{"always":false,"availability":"missing_dependency","description":"Pinned wire shape","display_name":"pin","enabled":true,"hash":"434258594813373227e112109f4f1d5c02ec0eab74ba153af0be0f6e8b409edf","missing":["env:PIN_UNSET_VAR"],"mutable":true,"name":"pin","optional":{"bins":[],"env":[],"mcp_servers":[],"tools":[]},"path":"<HOME>/data/skills/user/pin","requires":{"bins":[],"env":["PIN_UNSET_VAR"],"mcp_servers":[],"tools":["web_fetch"]},"shadowed_sources":[],"source":"user","tags":["b","a"],"triggers":[],"validation_errors":[],"version":1}"##,
    );

    pin(
        &server.get("/api/skills?source=user"),
        200,
        &h,
        r##"{"invalid":{"user:broken":["SKILL.md not found"]},"items":[{"always":false,"availability":"missing_dependency","description":"Pinned wire shape","display_name":"pin","enabled":true,"hash":"434258594813373227e112109f4f1d5c02ec0eab74ba153af0be0f6e8b409edf","missing":["env:PIN_UNSET_VAR"],"mutable":true,"name":"pin","optional":{"bins":[],"env":[],"mcp_servers":[],"tools":[]},"requires":{"bins":[],"env":["PIN_UNSET_VAR"],"mcp_servers":[],"tools":["web_fetch"]},"shadowed_sources":[],"source":"user","tags":["b","a"],"triggers":[],"validation_errors":[],"version":1}],"page":1,"page_size":50,"total":1}"##,
    );
    pin(
        &server.get("/api/skills/pin"),
        200,
        &h,
        r##"{"always":false,"availability":"missing_dependency","body_preview":"# Pin\n\nBody.","body_truncated":false,"description":"Pinned wire shape","display_name":"pin","enabled":true,"hash":"434258594813373227e112109f4f1d5c02ec0eab74ba153af0be0f6e8b409edf","missing":["env:PIN_UNSET_VAR"],"mutable":true,"name":"pin","optional":{"bins":[],"env":[],"mcp_servers":[],"tools":[]},"path":"<HOME>/data/skills/user/pin","requires":{"bins":[],"env":["PIN_UNSET_VAR"],"mcp_servers":[],"tools":["web_fetch"]},"shadowed_sources":[],"source":"user","tags":["b","a"],"triggers":[],"validation_errors":[],"version":1,"versions":[]}"##,
    );
    pin(
        &server.get("/api/skills/pin/content"),
        200,
        &h,
        r##"{"content":"---\nname: pin\ndescription: Pinned wire shape\ntags: [b, a]\nrequires:\n  tools: [web_fetch]\n  env: [PIN_UNSET_VAR]\n---\n\n# Pin\n\nBody.\n","display_name":"pin","hash":"434258594813373227e112109f4f1d5c02ec0eab74ba153af0be0f6e8b409edf","mutable":true,"name":"pin","source":"user"}"##,
    );
    pin(
        &server.request("POST", "/api/skills/pin/validate", &[], None),
        200,
        &h,
        r##"{"errors":[],"hash":"434258594813373227e112109f4f1d5c02ec0eab74ba153af0be0f6e8b409edf","name":"pin","valid":true}"##,
    );

    let r = server.put("/api/skills/pin", &json!({"content": PIN_MD.replace("tags:", "version: 2\ntags:")}));
    let snap = r.json()["snapshot"].as_str().expect("snapshot id").to_string();
    let hs = [(home.as_str(), "<HOME>"), (snap.as_str(), "<SNAP>")];
    pin(
        &r,
        200,
        &hs,
        r##"{"always":false,"availability":"missing_dependency","description":"Pinned wire shape","display_name":"pin","enabled":true,"hash":"afc93474dd98d6eae98b18f63f22191e95f9037d98007608a1a69a8612da43d6","missing":["env:PIN_UNSET_VAR"],"mutable":true,"name":"pin","optional":{"bins":[],"env":[],"mcp_servers":[],"tools":[]},"path":"<HOME>/data/skills/user/pin","requires":{"bins":[],"env":["PIN_UNSET_VAR"],"mcp_servers":[],"tools":["web_fetch"]},"shadowed_sources":[],"snapshot":"<SNAP>","source":"user","tags":["b","a"],"triggers":[],"validation_errors":[],"version":2}"##,
    );
    pin(&server.get("/api/skills/pin/versions"), 200, &hs, r##"{"name":"pin","versions":["<SNAP>"]}"##);
    pin(
        &server.patch("/api/skills/pin/enabled", &json!({"enabled": false})),
        200,
        &hs,
        r##"{"always":false,"availability":"disabled","description":"Pinned wire shape","display_name":"pin","enabled":false,"hash":"afc93474dd98d6eae98b18f63f22191e95f9037d98007608a1a69a8612da43d6","missing":[],"mutable":true,"name":"pin","optional":{"bins":[],"env":[],"mcp_servers":[],"tools":[]},"path":"<HOME>/data/skills/user/pin","requires":{"bins":[],"env":["PIN_UNSET_VAR"],"mcp_servers":[],"tools":["web_fetch"]},"shadowed_sources":[],"source":"user","tags":["b","a"],"triggers":[],"validation_errors":[],"version":2}"##,
    );
    pin(
        &server.request("POST", &format!("/api/skills/pin/rollback/{snap}"), &[], None),
        200,
        &hs,
        r##"{"always":false,"availability":"missing_dependency","description":"Pinned wire shape","display_name":"pin","enabled":true,"hash":"434258594813373227e112109f4f1d5c02ec0eab74ba153af0be0f6e8b409edf","missing":["env:PIN_UNSET_VAR"],"mutable":true,"name":"pin","optional":{"bins":[],"env":[],"mcp_servers":[],"tools":[]},"path":"<HOME>/data/skills/user/pin","requires":{"bins":[],"env":["PIN_UNSET_VAR"],"mcp_servers":[],"tools":["web_fetch"]},"shadowed_sources":[],"source":"user","tags":["b","a"],"triggers":[],"validation_errors":[],"version":1}"##,
    );
    // The rollback snapshotted the state it replaced.
    let versions = server.get("/api/skills/pin/versions").json()["versions"].clone();
    let snap2 = versions[0].as_str().expect("rollback snapshot id").to_string();
    let hs = [(home.as_str(), "<HOME>"), (snap.as_str(), "<SNAP>"), (snap2.as_str(), "<SNAP2>")];

    // A package that no longer loads: detail and validate report it.
    std::fs::write(user_root.join("pin/extra.txt"), "x").expect("extra file");
    pin(
        &server.get("/api/skills/pin"),
        200,
        &hs,
        r##"{"always":false,"availability":"missing_dependency","description":"Pinned wire shape","display_name":"pin","enabled":true,"hash":"434258594813373227e112109f4f1d5c02ec0eab74ba153af0be0f6e8b409edf","missing":["env:PIN_UNSET_VAR"],"mutable":true,"name":"pin","optional":{"bins":[],"env":[],"mcp_servers":[],"tools":[]},"path":"<HOME>/data/skills/user/pin","requires":{"bins":[],"env":["PIN_UNSET_VAR"],"mcp_servers":[],"tools":["web_fetch"]},"shadowed_sources":[],"source":"user","tags":["b","a"],"triggers":[],"validation_errors":["unsupported package entry: extra.txt"],"version":1,"versions":["<SNAP2>","<SNAP>"]}"##,
    );
    pin(
        &server.request("POST", "/api/skills/pin/validate", &[], None),
        200,
        &hs,
        r##"{"errors":["unsupported package entry: extra.txt"],"valid":false}"##,
    );
    std::fs::remove_file(user_root.join("pin/extra.txt")).expect("remove extra file");

    let r = server.delete("/api/skills/invalid/user/broken");
    let moved = r.json()["snapshot"].as_str().expect("snapshot path").to_string();
    pin(&r, 200, &[(moved.as_str(), "<MOVED>")], r##"{"directory":"broken","snapshot":"<MOVED>","source":"user"}"##);

    let zipped = "---\nname: zipped\ndescription: From an archive\n---\n\nUnpacked body.\n";
    pin(
        &upload(&server, "z.zip", &zip_of(zipped)),
        201,
        &h,
        r##"{"always":false,"availability":"available","description":"From an archive","display_name":"zipped","enabled":true,"hash":"7aa5aa792dfa4b62548c03d655ea7d84f2d65d288a8cbbc0b2b65b37c8af40c9","missing":[],"mutable":true,"name":"zipped","optional":{"bins":[],"env":[],"mcp_servers":[],"tools":[]},"requires":{"bins":[],"env":[],"mcp_servers":[],"tools":[]},"shadowed_sources":[],"source":"user","tags":[],"triggers":[],"validation_errors":[],"version":1}"##,
    );
    pin(&server.get("/api/skills/nope"), 404, &h, r##"{"detail":"Skill not found"}"##);
}

#[test]
fn request_shape_errors_are_byte_identical() {
    let server = TestServer::start();
    let none: [(&str, &str); 0] = [];
    pin(
        &server.post(
            "/api/skills",
            &json!({"content": 5, "source": "nope", "support_files": {"references/a.md": 1}, "enabled": "maybe"}),
        ),
        422,
        &none,
        r##"{"detail":[{"input":{"content":5,"enabled":"maybe","source":"nope","support_files":{"references/a.md":1}},"loc":["body","name"],"msg":"Field required","type":"missing"},{"input":5,"loc":["body","content"],"msg":"Input should be a valid string","type":"string_type"},{"input":"nope","loc":["body","source"],"msg":"Input should be 'user', 'agent' or 'builtin'","type":"literal_error"},{"input":1,"loc":["body","support_files","references/a.md"],"msg":"Input should be a valid string","type":"string_type"},{"input":"maybe","loc":["body","enabled"],"msg":"Input should be a valid boolean","type":"bool_type"}]}"##,
    );
    pin(
        &server.post("/api/skills", &json!({"name": "a", "content": "b", "support_files": []})),
        422,
        &none,
        r##"{"detail":[{"input":[],"loc":["body","support_files"],"msg":"Input should be a valid dictionary","type":"dict_type"}]}"##,
    );
    pin(
        &server.post("/api/skills", &json!([1])),
        422,
        &none,
        r##"{"detail":[{"input":[1],"loc":["body"],"msg":"Input should be a valid dictionary or object to extract fields from","type":"model_attributes_type"}]}"##,
    );
    pin(
        &server.request("PUT", "/api/skills/x", &[], Some("{\"content\": ")),
        422,
        &none,
        r##"{"detail":[{"ctx":{"error":"EOF while parsing a value at line 1 column 12"},"input":{},"loc":["body",12],"msg":"JSON decode error","type":"json_invalid"}]}"##,
    );
    pin(
        &server.put("/api/skills/x", &json!({"expected_hash": 3})),
        422,
        &none,
        r##"{"detail":[{"input":{"expected_hash":3},"loc":["body","content"],"msg":"Field required","type":"missing"},{"input":3,"loc":["body","expected_hash"],"msg":"Input should be a valid string","type":"string_type"}]}"##,
    );
    pin(
        &server.patch("/api/skills/x/enabled", &json!({})),
        422,
        &none,
        r##"{"detail":[{"input":{},"loc":["body","enabled"],"msg":"Field required","type":"missing"}]}"##,
    );
    pin(
        &server.patch("/api/skills/x/enabled", &json!({"enabled": [true]})),
        422,
        &none,
        r##"{"detail":[{"input":[true],"loc":["body","enabled"],"msg":"Input should be a valid boolean","type":"bool_type"}]}"##,
    );
    pin(
        &server.get("/api/skills?page=0&page_size=500&enabled=maybe"),
        422,
        &none,
        r##"{"detail":[{"input":"maybe","loc":["query","enabled"],"msg":"Input should be a valid boolean, unable to interpret input","type":"bool_parsing"},{"ctx":{"ge":1},"input":"0","loc":["query","page"],"msg":"Input should be greater than or equal to 1","type":"greater_than_equal"},{"ctx":{"le":200},"input":"500","loc":["query","page_size"],"msg":"Input should be less than or equal to 200","type":"less_than_equal"}]}"##,
    );
    pin(
        &server.get("/api/skills?page=x"),
        422,
        &none,
        r##"{"detail":[{"input":"x","loc":["query","page"],"msg":"Input should be a valid integer, unable to parse string as an integer","type":"int_parsing"}]}"##,
    );
    pin(
        &server.request("POST", "/api/skills/import", &[], Some("{}")),
        422,
        &none,
        r##"{"detail":[{"input":null,"loc":["body","file"],"msg":"Field required","type":"missing"}]}"##,
    );
    pin(
        &server.post("/api/mcp/servers", &json!({"name": 1, "bogus": true, "headers": {"a": 1, "b": "ok"}})),
        422,
        &none,
        r##"{"detail":[{"input":{"bogus":true,"headers":{"a":1,"b":"ok"},"name":1},"loc":["body","display_name"],"msg":"Field required","type":"missing"},{"input":{"bogus":true,"headers":{"a":1,"b":"ok"},"name":1},"loc":["body","url"],"msg":"Field required","type":"missing"},{"input":true,"loc":["body","bogus"],"msg":"Extra inputs are not permitted","type":"extra_forbidden"},{"input":1,"loc":["body","headers","a"],"msg":"Input should be a valid string","type":"string_type"},{"input":1,"loc":["body","name"],"msg":"Input should be a valid string","type":"string_type"}]}"##,
    );
    pin(
        &server.post("/api/mcp/servers", &json!("x")),
        422,
        &none,
        r##"{"detail":[{"input":"x","loc":["body"],"msg":"Input should be a valid dictionary or object to extract fields from","type":"model_attributes_type"}]}"##,
    );
    pin(
        &server.put("/api/mcp/servers/x", &json!({"name": "x", "headers": 3, "description": 4})),
        422,
        &none,
        r##"{"detail":[{"input":{"description":4,"headers":3,"name":"x"},"loc":["body","display_name"],"msg":"Field required","type":"missing"},{"input":{"description":4,"headers":3,"name":"x"},"loc":["body","url"],"msg":"Field required","type":"missing"},{"input":4,"loc":["body","description"],"msg":"Input should be a valid string","type":"string_type"},{"input":3,"loc":["body","headers"],"msg":"Input should be a valid dictionary","type":"dict_type"},{"input":"x","loc":["body","name"],"msg":"Extra inputs are not permitted","type":"extra_forbidden"}]}"##,
    );
    pin(
        &server.patch("/api/sessions/abc", &json!({"title": 5})),
        422,
        &none,
        r##"{"detail":[{"input":5,"loc":["body","title"],"msg":"Input should be a valid string","type":"string_type"}]}"##,
    );
    pin(
        &server.patch("/api/sessions/abc", &json!({})),
        422,
        &none,
        r##"{"detail":[{"input":{},"loc":["body","title"],"msg":"Field required","type":"missing"}]}"##,
    );
    pin(
        &server.patch("/api/sessions/abc", &json!({"title": "  "})),
        422,
        &none,
        r##"{"detail":[{"ctx":{"error":{}},"input":"  ","loc":["body","title"],"msg":"Value error, title must not be empty","type":"value_error"}]}"##,
    );
}

fn write_proposal(server: &TestServer, id: &str, created: f64, name: &str, valid: bool) {
    let dir = server.home.join("data/skill-evolution/proposals");
    std::fs::create_dir_all(&dir).expect("proposals dir");
    let content = format!("---\nname: {name}\ndescription: Evolved\n---\n\nSteps.\n");
    let errors: Vec<&str> = if valid { vec![] } else { vec!["SKILL.md must start with YAML frontmatter"] };
    let p = json!({"id": id, "action": "create", "name": name, "candidate_content": content,
        "reason": "Reusable workflow evidence", "evidence_ids": ["1796002895006-1a2b3c4d"], "base_hash": null,
        "status": "pending", "validation": {"valid": valid, "errors": errors},
        "created_at": created, "updated_at": created, "applied_version": null, "fingerprint": "f00dcafe0123456789abcdef"});
    std::fs::write(dir.join(format!("{id}.json")), serde_json::to_string_pretty(&p).expect("json")).expect("write");
}

#[test]
fn evolution_views_are_byte_identical() {
    let server = TestServer::start();
    let none: [(&str, &str); 0] = [];
    write_proposal(&server, "aaaa", 1796002895.5, "evo-one", true);
    write_proposal(&server, "bbbb", 1796002899.25, "evo-two", false);
    pin(
        &server.get("/api/skill-evolution/proposals"),
        200,
        &none,
        r##"{"enabled":false,"items":[{"action":"create","applied_version":null,"base_hash":null,"candidate_content":"---\nname: evo-two\ndescription: Evolved\n---\n\nSteps.\n","created_at":1796002899.25,"evidence_ids":["1796002895006-1a2b3c4d"],"fingerprint":"f00dcafe0123456789abcdef","id":"bbbb","name":"evo-two","reason":"Reusable workflow evidence","status":"pending","updated_at":1796002899.25,"validation":{"errors":["SKILL.md must start with YAML frontmatter"],"valid":false}},{"action":"create","applied_version":null,"base_hash":null,"candidate_content":"---\nname: evo-one\ndescription: Evolved\n---\n\nSteps.\n","created_at":1796002895.5,"evidence_ids":["1796002895006-1a2b3c4d"],"fingerprint":"f00dcafe0123456789abcdef","id":"aaaa","name":"evo-one","reason":"Reusable workflow evidence","status":"pending","updated_at":1796002895.5,"validation":{"errors":[],"valid":true}}]}"##,
    );
    pin(
        &server.get("/api/skill-evolution/proposals/aaaa"),
        200,
        &none,
        r##"{"action":"create","applied_version":null,"base_hash":null,"candidate_content":"---\nname: evo-one\ndescription: Evolved\n---\n\nSteps.\n","created_at":1796002895.5,"evidence_ids":["1796002895006-1a2b3c4d"],"fingerprint":"f00dcafe0123456789abcdef","id":"aaaa","name":"evo-one","reason":"Reusable workflow evidence","status":"pending","updated_at":1796002895.5,"validation":{"errors":[],"valid":true}}"##,
    );
    let r = server.request("POST", "/api/skill-evolution/proposals/bbbb/approve", &[], None);
    pin(&r, 422, &none, r##"{"detail":"proposal candidate is invalid"}"##);
    let r = server.request("POST", "/api/skill-evolution/proposals/bbbb/reject", &[], None);
    let masked = HttpResp { body: mask_number(&r.body, "updated_at"), ..r };
    pin(
        &masked,
        200,
        &none,
        r##"{"action":"create","applied_version":null,"base_hash":null,"candidate_content":"---\nname: evo-two\ndescription: Evolved\n---\n\nSteps.\n","created_at":1796002899.25,"evidence_ids":["1796002895006-1a2b3c4d"],"fingerprint":"f00dcafe0123456789abcdef","id":"bbbb","name":"evo-two","reason":"Reusable workflow evidence","status":"rejected","updated_at":0,"validation":{"errors":["SKILL.md must start with YAML frontmatter"],"valid":false}}"##,
    );
    let r = server.request("POST", "/api/skill-evolution/proposals/aaaa/approve", &[], None);
    let masked = HttpResp { body: mask_number(&r.body, "updated_at"), ..r };
    pin(
        &masked,
        200,
        &none,
        r##"{"action":"create","applied_version":"","base_hash":null,"candidate_content":"---\nname: evo-one\ndescription: Evolved\n---\n\nSteps.\n","created_at":1796002895.5,"evidence_ids":["1796002895006-1a2b3c4d"],"fingerprint":"f00dcafe0123456789abcdef","id":"aaaa","name":"evo-one","reason":"Reusable workflow evidence","status":"applied","updated_at":0,"validation":{"errors":[],"valid":true}}"##,
    );
    let r = server.get("/api/skill-evolution/proposals");
    let masked = HttpResp { body: mask_number(&r.body, "updated_at"), ..r };
    pin(
        &masked,
        200,
        &none,
        r##"{"enabled":false,"items":[{"action":"create","applied_version":null,"base_hash":null,"candidate_content":"---\nname: evo-two\ndescription: Evolved\n---\n\nSteps.\n","created_at":1796002899.25,"evidence_ids":["1796002895006-1a2b3c4d"],"fingerprint":"f00dcafe0123456789abcdef","id":"bbbb","name":"evo-two","reason":"Reusable workflow evidence","status":"rejected","updated_at":0,"validation":{"errors":["SKILL.md must start with YAML frontmatter"],"valid":false}},{"action":"create","applied_version":"","base_hash":null,"candidate_content":"---\nname: evo-one\ndescription: Evolved\n---\n\nSteps.\n","created_at":1796002895.5,"evidence_ids":["1796002895006-1a2b3c4d"],"fingerprint":"f00dcafe0123456789abcdef","id":"aaaa","name":"evo-one","reason":"Reusable workflow evidence","status":"applied","updated_at":0,"validation":{"errors":[],"valid":true}}]}"##,
    );
    pin(
        &server.request("POST", "/api/skill-evolution/proposals/aaaa/reject", &[], None),
        409,
        &none,
        r##"{"detail":"proposal is not pending"}"##,
    );
    pin(&server.get("/api/skill-evolution/proposals/zzzz"), 404, &none, r##"{"detail":"proposal not found"}"##);
}
