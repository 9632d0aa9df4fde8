//! The built-in stdio MCP entry (`"command": "python"` in mcp_servers/mcp_config.json) runs on
//! the checkout's `.venv/` made by `scripts/setup.sh`, so a stock Debian/Ubuntu machine (whose
//! python3 has no MCP SDK and refuses `pip install`, PEP 668) connects it with no manual step.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::common::{fresh_home, venv_python, wait_for, TestServer, WAIT};

/// A directory whose `python` and `python3` fail at once: with it first on PATH, only the
/// virtual environment can start the server.
fn pythons_without_mcp(home: &Path) -> PathBuf {
    let bin = home.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for name in ["python", "python3"] {
        let p = bin.join(name);
        std::fs::write(&p, "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'mcp'\" >&2\nexit 1\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = Command::new(bin.join("python3")).args(["-c", "import mcp"]).stderr(Stdio::null()).status().unwrap();
    assert!(!out.success(), "the PATH python must not have the MCP SDK");
    bin
}

#[test]
fn builtin_stdio_entry_connects_through_the_venv_with_no_sdk_on_path() {
    let venv = venv_python();
    let home = fresh_home("venv");
    let bin = pythons_without_mcp(&home);
    let server = TestServer::builder().home(&home).env("PATH", &format!("{}:/usr/bin:/bin", bin.display())).start();

    let r = server.post("/api/mcp/servers/test_stdio_mcp/connect", &json!({}));
    assert_eq!(r.status, 200, "{}", r.body);
    let dto = r.json();
    assert_eq!(
        (&dto["status"], &dto["status_error"], &dto["tool_count"], &dto["builtin"], &dto["type"]),
        (&json!("connected"), &Value::Null, &json!(1), &json!(true), &json!("stdio")),
        "{dto}"
    );
    let tools = server.get("/api/mcp/servers/test_stdio_mcp/tools").json();
    assert_eq!(
        (&tools["source"], &tools["tools"][0]["name"]),
        (&json!("live"), &json!("mcp_test_stdio_mcp_say_hello"))
    );
    // The child is the venv's interpreter, found without PATH.
    let started = format!("program={:?}", venv.display().to_string());
    wait_for("the stdio start log line", WAIT, || {
        server
            .log_text()
            .lines()
            .any(|l| l.contains("event=mcp.stdio.started server=test_stdio_mcp") && l.contains(&started))
            .then_some(())
    });
    let r = server.post("/api/mcp/servers/test_stdio_mcp/disconnect", &json!({}));
    assert_eq!((r.status, &r.json()["status"]), (200, &json!("disconnected")), "{}", r.body);
}
