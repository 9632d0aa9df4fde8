//! Typed MCP messages: the params we send (`initialize`, `tools/call`) and the results,
//! requests and notifications we read (`initialize`, `tools/list`, `tools/call`,
//! `elicitation/create`, `notifications/progress`). Pure data; any thread.
//!
//! Servers are untrusted and not all careful, so reading is lenient field by field: a field of
//! an unexpected type reads as absent (a non-string name is no name, a non-object schema is no
//! schema), a list item that is not an object reads as `None`, and a message that is not an
//! object reads as the default. What is then missing is judged by the caller, which owns the
//! error wording. Free-form parts (schemas, capabilities, structured content) stay `Value`.

use serde::de::{DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Reads `v` as `T` when it is an object, else `T::default()` (see the module header).
pub(crate) fn read<T: DeserializeOwned + Default>(v: Option<Value>) -> T {
    object_as(v.unwrap_or(Value::Null)).unwrap_or_default()
}

/// `T` from an object; `None` for any other value.
fn object_as<T: DeserializeOwned>(v: Value) -> Option<T> {
    if v.is_object() {
        serde_json::from_value(v).ok()
    } else {
        None
    }
}

/// A string, or `None` for any other value.
fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => Some(s),
        _ => None,
    })
}

/// A number, or `None` for any other value.
fn number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Ok(Value::deserialize(d)?.as_f64())
}

/// A boolean; any other value is `false`.
fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Value::deserialize(d)?.as_bool().unwrap_or(false))
}

/// An object, or `None` for any other value.
fn object<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Ok(Some(Value::deserialize(d)?).filter(Value::is_object))
}

/// Any value, null included (absent stays `None` through `default`).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// A typed object, or `None` for any other value.
fn nested<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<T>, D::Error> {
    Ok(object_as(Value::deserialize(d)?))
}

/// A list whose items are read as `T` (`None` for an item that is not an object); `None`
/// when the value is not a list.
fn items<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<Vec<Option<T>>>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(items) => Some(items.into_iter().map(object_as).collect()),
        _ => None,
    })
}

/// `initialize` params.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InitializeParams<'a> {
    pub(crate) protocol_version: &'a str,
    pub(crate) capabilities: ClientCapabilities,
    pub(crate) client_info: Implementation<'a>,
}

/// What the client declares: elicitation in form mode, or nothing.
#[derive(Debug, Default, Serialize)]
pub(crate) struct ClientCapabilities {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) elicitation: Option<FormElicitation>,
}

/// `{"form": {}}`.
#[derive(Debug, Default, Serialize)]
pub(crate) struct FormElicitation {
    pub(crate) form: Map<String, Value>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Implementation<'a> {
    pub(crate) name: &'a str,
    pub(crate) version: &'a str,
}

/// `initialize` result.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InitializeResult {
    #[serde(default, deserialize_with = "text")]
    pub(crate) protocol_version: Option<String>,
    #[serde(default, deserialize_with = "present")]
    pub(crate) capabilities: Option<Value>,
    #[serde(default, deserialize_with = "nested")]
    pub(crate) server_info: Option<ServerImplementation>,
    #[serde(default, deserialize_with = "text")]
    pub(crate) instructions: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ServerImplementation {
    #[serde(default, deserialize_with = "text")]
    pub(crate) name: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub(crate) version: Option<String>,
}

/// `tools/list` params (one page).
#[derive(Debug, Serialize)]
pub(crate) struct ListToolsParams<'a> {
    pub(crate) cursor: &'a str,
}

/// `tools/list` result: one page.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListToolsResult {
    #[serde(default, deserialize_with = "items")]
    pub(crate) tools: Option<Vec<Option<ListedTool>>>,
    #[serde(default, deserialize_with = "text")]
    pub(crate) next_cursor: Option<String>,
}

/// One `tools[]` entry as listed (annotations and other keys are not read).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListedTool {
    #[serde(default, deserialize_with = "text")]
    pub(crate) name: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub(crate) description: Option<String>,
    #[serde(default, deserialize_with = "object")]
    pub(crate) input_schema: Option<Value>,
}

/// `tools/call` params (`_meta.progressToken` is added when the request is sent).
#[derive(Debug, Serialize)]
pub(crate) struct CallToolParams<'a> {
    pub(crate) name: &'a str,
    pub(crate) arguments: &'a Map<String, Value>,
}

/// `tools/call` result.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CallToolResult {
    #[serde(default, deserialize_with = "items")]
    pub(crate) content: Option<Vec<Option<ContentBlock>>>,
    #[serde(default, deserialize_with = "flag")]
    pub(crate) is_error: bool,
    /// Null counts as absent.
    #[serde(default)]
    pub(crate) structured_content: Option<Value>,
}

/// One `content[]` block: the keys of every block type, each read if present.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ContentBlock {
    #[serde(rename = "type", default, deserialize_with = "text")]
    pub(crate) kind: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub(crate) text: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub(crate) mime_type: Option<String>,
    /// Base64 of an image or audio block.
    #[serde(default, deserialize_with = "text")]
    pub(crate) data: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub(crate) uri: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub(crate) name: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub(crate) description: Option<String>,
    #[serde(default, deserialize_with = "nested")]
    pub(crate) resource: Option<ResourceContents>,
}

/// The `resource` of an embedded resource block.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ResourceContents {
    #[serde(default, deserialize_with = "text")]
    pub(crate) uri: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub(crate) mime_type: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub(crate) text: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub(crate) blob: Option<String>,
}

/// `elicitation/create` params.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ElicitRequestParams {
    /// Absent (or not a string) is form mode.
    #[serde(default, deserialize_with = "text")]
    pub(crate) mode: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub(crate) message: Option<String>,
    /// Present even when null (then it is checked, and refused, as a schema).
    #[serde(default, deserialize_with = "present")]
    pub(crate) requested_schema: Option<Value>,
}

/// `notifications/progress` params.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ProgressParams {
    /// Any value; compared as text (see the inbox).
    #[serde(default, deserialize_with = "present")]
    pub(crate) progress_token: Option<Value>,
    #[serde(default, deserialize_with = "number")]
    pub(crate) progress: Option<f64>,
    #[serde(default, deserialize_with = "number")]
    pub(crate) total: Option<f64>,
    #[serde(default, deserialize_with = "text")]
    pub(crate) message: Option<String>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn params_serialise_as_the_spec_spells_them() {
        let args = Map::new();
        let init = InitializeParams {
            protocol_version: "2025-11-25",
            capabilities: ClientCapabilities { elicitation: Some(FormElicitation::default()) },
            client_info: Implementation { name: "cashcode", version: "1" },
        };
        assert_eq!(
            serde_json::to_value(&init).unwrap(),
            json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"form": {}}},
                   "clientInfo": {"name": "cashcode", "version": "1"}})
        );
        let plain = InitializeParams { capabilities: ClientCapabilities::default(), ..init };
        assert_eq!(serde_json::to_value(&plain).unwrap()["capabilities"], json!({}));
        assert_eq!(
            serde_json::to_value(CallToolParams { name: "t", arguments: &args }).unwrap(),
            json!({"name": "t", "arguments": {}})
        );
    }

    /// Odd types read as absent, non-objects as the default; nothing fails.
    #[test]
    fn malformed_messages_read_as_absent_fields() {
        let init: InitializeResult = read(Some(json!({"protocolVersion": 2025, "serverInfo": "x", "instructions": 1})));
        assert!(init.protocol_version.is_none() && init.server_info.is_none() && init.instructions.is_none());
        assert_eq!(init.capabilities, None);
        let init: InitializeResult = read(Some(json!({"capabilities": null, "serverInfo": {"name": ["n"]}})));
        assert_eq!(init.capabilities, Some(Value::Null));
        assert!(init.server_info.expect("an object").name.is_none());
        for v in [json!(5), json!("x"), json!([1]), Value::Null] {
            let r: InitializeResult = read(Some(v.clone()));
            assert!(r.protocol_version.is_none(), "{v}");
            let l: ListToolsResult = read(Some(v.clone()));
            assert!(l.tools.is_none() && l.next_cursor.is_none(), "{v}");
            let c: CallToolResult = read(Some(v.clone()));
            assert!(c.content.is_none() && !c.is_error && c.structured_content.is_none(), "{v}");
        }
        let l: ListToolsResult =
            read(Some(json!({"tools": [5, {"name": 3, "description": {}, "inputSchema": []}], "nextCursor": 7})));
        let tools = l.tools.expect("a list");
        assert!(tools[0].is_none() && l.next_cursor.is_none());
        let t = tools[1].as_ref().expect("an object");
        assert!(t.name.is_none() && t.description.is_none() && t.input_schema.is_none());
        let l: ListToolsResult = read(Some(json!({"tools": {"name": "x"}})));
        assert!(l.tools.is_none());
        let c: CallToolResult = read(Some(
            json!({"content": [1, {"type": 2, "resource": "r"}], "isError": "yes", "structuredContent": null}),
        ));
        let content = c.content.expect("a list");
        assert!(content[0].is_none() && content[1].as_ref().is_some_and(|b| b.kind.is_none() && b.resource.is_none()));
        assert!(!c.is_error && c.structured_content.is_none());
        let e: ElicitRequestParams = read(Some(json!({"mode": 1, "message": "m", "requestedSchema": null})));
        assert_eq!((e.mode, e.message, e.requested_schema), (None, Some("m".into()), Some(Value::Null)));
        let p: ProgressParams = read(Some(json!({"progressToken": 5, "progress": "half", "total": 3, "message": 1})));
        assert_eq!((p.progress_token, p.progress, p.total, p.message), (Some(json!(5)), None, Some(3.0), None));
        let p: ProgressParams = read(None);
        assert!(p.progress_token.is_none());
    }
}
