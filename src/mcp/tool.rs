//! A registered MCP tool as the model sees it: the wrapper the manager builds from a server's
//! `tools/list` entry, with its input schema normalised for providers. Pure data; any thread.

use serde_json::{json, Map, Value};

use super::client::ToolInfo;

/// A registered MCP tool as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveTool {
    /// `mcp_{server}_{tool}`, provider-safe.
    pub name: String,
    pub(crate) server: String,
    pub(crate) original_name: String,
    /// The tool's description, or its name when it has none.
    pub(crate) description: String,
    /// Normalised for providers.
    pub(crate) input_schema: Value,
    /// As the server sent it.
    pub(crate) raw_schema: Value,
    pub(crate) raw_description: Option<String>,
}

impl LiveTool {
    /// The wrapper for `tool` of `server`, registered as `name`: a blank description becomes
    /// the tool's name, the schema is normalised.
    pub(crate) fn new(name: String, server: &str, tool: &ToolInfo) -> LiveTool {
        LiveTool {
            name,
            server: server.to_string(),
            original_name: tool.name.clone(),
            description: tool.description.clone().filter(|d| !d.trim().is_empty()).unwrap_or_else(|| tool.name.clone()),
            input_schema: normalize_schema(&tool.input_schema),
            raw_schema: tool.input_schema.clone(),
            raw_description: tool.description.clone(),
        }
    }
}

/// Schema normalisation for providers (docs/tools-and-mcp.md §5, minus the original's quirk of
/// turning untyped leaf properties into objects): a non-object schema becomes an empty object
/// schema, the top level gets `type`/`properties`/`required` defaults, `$schema` is dropped,
/// and `type: [X, "null"]` becomes `type: X, nullable: true` at every property level.
pub(crate) fn normalize_schema(raw: &Value) -> Value {
    let Value::Object(m) = raw else {
        return json!({"type": "object", "properties": {}, "required": []});
    };
    let mut m = m.clone();
    m.remove("$schema");
    fix_nullable(&mut m);
    m.entry("type").or_insert_with(|| json!("object"));
    m.entry("properties").or_insert_with(|| json!({}));
    m.entry("required").or_insert_with(|| json!([]));
    Value::Object(m)
}

fn fix_nullable(m: &mut Map<String, Value>) {
    if let Some(Value::Array(types)) = m.get("type") {
        let non_null: Vec<&Value> = types.iter().filter(|t| t.as_str() != Some("null")).collect();
        if non_null.len() == 1 && types.len() == 2 {
            let t = non_null[0].clone();
            m.insert("type".into(), t);
            m.insert("nullable".into(), json!(true));
        }
    }
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        for p in props.values_mut() {
            if let Value::Object(pm) = p {
                fix_nullable(pm);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_are_normalised_for_providers() {
        assert_eq!(normalize_schema(&json!("nope")), json!({"type": "object", "properties": {}, "required": []}));
        let raw = json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                         "properties": {"a": {"type": ["integer", "null"]}, "b": {"anyOf": [{"type": "string"}]},
                                        "c": {"type": "object", "properties": {"d": {"type": ["null", "string"]}}}}});
        assert_eq!(
            normalize_schema(&raw),
            json!({"type": "object", "required": [],
                   "properties": {"a": {"type": "integer", "nullable": true}, "b": {"anyOf": [{"type": "string"}]},
                                  "c": {"type": "object", "properties": {"d": {"type": "string", "nullable": true}}}}})
        );
    }
}
