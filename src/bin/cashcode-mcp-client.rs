//! A small command-line MCP client on CashCode's own client, used to run the official client
//! conformance suite (`npx @modelcontextprotocol/conformance client --command ...`), which
//! appends the server URL as the last argument and names the scenario in
//! `MCP_CONFORMANCE_SCENARIO`. It connects (Streamable HTTP, or legacy SSE for URLs ending in
//! `/sse`), lists the tools, calls each one with arguments made from its schema, and closes.
//! It declares elicitation and accepts a server's form with the schema's defaults (SEP-1034).
//!
//! OAuth (`cashcode::mcp::auth::headless`): a server that answers 401 is authorized on the
//! spot, the authorization URL followed with GET; `--client-metadata-url URL` names our client
//! ID metadata document; the suite's `MCP_CONFORMANCE_CONTEXT` may carry a pre-registered
//! client.
//!
//! Usage: `cashcode-mcp-client [--client-metadata-url URL] URL`. Exit code 0 when every step worked, 1 otherwise. Also handy
//! for checking a server by hand: it prints the server info and every tool result.

use std::collections::BTreeMap;
use std::process::ExitCode;

use cashcode::mcp::client::{AuthHandle, Client, ClientConfig};
use cashcode::mcp::elicit::{Answer, Request};
use cashcode::mcp::transport::{HttpSpec, TransportSpec};
use serde_json::{json, Map, Value};

/// A plausible value for a JSON-schema property (defaults and enums first).
fn sample(schema: &Value) -> Value {
    if let Some(d) = schema.get("default") {
        return d.clone();
    }
    if let Some(first) = schema.get("enum").and_then(Value::as_array).and_then(|e| e.first()) {
        return first.clone();
    }
    match schema.get("type").and_then(Value::as_str).unwrap_or("string") {
        "number" | "integer" => json!(1),
        "boolean" => json!(true),
        "array" => json!([]),
        "object" => json!({}),
        _ => json!("test"),
    }
}

fn arguments(input_schema: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    let props = input_schema.get("properties").and_then(Value::as_object);
    let required: Vec<&str> = input_schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(props) = props {
        for (k, s) in props {
            if required.contains(&k.as_str()) {
                out.insert(k.clone(), sample(s));
            }
        }
    }
    out
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let Some(url) = std::env::args().skip(1).last() else {
        eprintln!("usage: cashcode-mcp-client URL");
        return ExitCode::from(2);
    };
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let http = HttpSpec { url: url.clone(), headers: BTreeMap::new() };
    let spec = if url.trim_end_matches('/').ends_with("/sse") {
        TransportSpec::Sse(http)
    } else {
        TransportSpec::StreamableHttp(http)
    };
    let args: Vec<String> = std::env::args().collect();
    let cimd = args.iter().position(|a| a == "--client-metadata-url").and_then(|i| args.get(i + 1)).cloned();
    let context = std::env::var("MCP_CONFORMANCE_CONTEXT").ok();
    let auth = cashcode::mcp::auth::headless(&url, context.as_deref(), cimd);
    let cfg = ClientConfig {
        elicitation: true,
        auth: Some(AuthHandle(std::sync::Arc::new(auth))),
        ..ClientConfig::default()
    };
    // Nobody is at the keyboard: a server's form is accepted with its defaults (SEP-1034).
    let accept_defaults = |req: &Request| Answer::Accept(req.form.defaults());
    let client = match Client::connect("conformance", &spec, cfg) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("connect failed: {e}");
            return ExitCode::from(1);
        }
    };
    let info = client.server_info();
    println!("scenario={scenario:?} server={} {} protocol={}", info.name, info.version, info.protocol_version);
    let tools = match client.list_tools() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("tools/list failed: {e}");
            return ExitCode::from(1);
        }
    };
    let mut ok = true;
    for t in &tools {
        let timeout = client.config().call_timeout;
        match client.call_tool_asking(&t.name, &arguments(&t.input_schema), None, timeout, Some(&accept_defaults)) {
            Ok(r) => println!("{}: {}", t.name, r.render()),
            Err(e) => {
                eprintln!("{}: call failed: {e}", t.name);
                ok = false;
            }
        }
    }
    client.close();
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
