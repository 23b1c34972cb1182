//! A form asked as JSON Schema (`json_schema`): at least everything MCP elicitation's
//! `requestedSchema` allows, and nested objects and arrays of objects, translated into the one
//! schema model (`gate::Field`, checked by `form.rs`). Keywords gatehouse does not enforce are
//! refused, never ignored. Property order is the form's field order, so the schema is read from
//! its text with objects kept in order (`serde_json::Map` sorts them).

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Number, Value};

use super::fields::{FieldCode, FieldError, pointer_token};
use super::gate::{ChoiceOption, Field, FieldKind};

/// JSON with objects in document order.
#[derive(Debug, Clone)]
enum Node {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NodeVisitor;
        impl<'de> Visitor<'de> for NodeVisitor {
            type Value = Node;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_bool<E>(self, b: bool) -> Result<Node, E> {
                Ok(Node::Bool(b))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Node, E> {
                Ok(Node::Number(n.into()))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Node, E> {
                Ok(Node::Number(n.into()))
            }
            fn visit_f64<E: serde::de::Error>(self, x: f64) -> Result<Node, E> {
                Number::from_f64(x).map(Node::Number).ok_or_else(|| E::custom("not a finite number"))
            }
            fn visit_str<E>(self, s: &str) -> Result<Node, E> {
                Ok(Node::String(s.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Node::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut members = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, Node>()? {
                    members.push((key, value));
                }
                Ok(Node::Object(members))
            }
        }
        deserializer.deserialize_any(NodeVisitor)
    }
}

impl Node {
    fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Object(members) => members.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn value(&self) -> Value {
        match self {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(*b),
            Node::Number(n) => Value::Number(n.clone()),
            Node::String(s) => Value::String(s.clone()),
            Node::Array(items) => Value::Array(items.iter().map(Node::value).collect()),
            Node::Object(members) => Value::Object(members.iter().map(|(k, v)| (k.clone(), v.value())).collect()),
        }
    }
}

/// The keywords a property may carry; any other is refused.
const KEYWORDS: [&str; 17] = [
    "type",
    "title",
    "description",
    "default",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "enumNames",
    "oneOf",
    "items",
    "minLength",
    "maxLength",
    "format",
    "minimum",
    "maximum",
    "minItems",
];
/// …and these too (arrays of picks or rows).
const ARRAY_KEYWORDS: [&str; 2] = ["maxItems", "uniqueItems"];

/// Translates `json_schema` (its text) into a form's fields; every problem is reported at its
/// pointer below `path`.
pub fn fields(p: &mut Vec<FieldError>, path: &str, text: &str) -> Vec<Field> {
    let root: Node = match serde_json::from_str(text) {
        Ok(root) => root,
        Err(e) => {
            p.push(FieldError::new(path, FieldCode::Type, format!("not JSON: {e}")));
            return Vec::new();
        }
    };
    if !matches!(root, Node::Object(_)) {
        p.push(FieldError::new(path, FieldCode::Type, "must be a JSON Schema object"));
        return Vec::new();
    }
    check_keywords(p, path, &root, &["$schema"]);
    if root.get("type").is_some_and(|t| !matches!(t, Node::String(s) if s == "object")) {
        p.push(FieldError::new(format!("{path}/type"), FieldCode::Invalid, "a form's schema is of type \"object\""));
    }
    if root.get("properties").is_none() {
        p.push(FieldError::new(format!("{path}/properties"), FieldCode::Required, "a form's schema needs properties"));
        return Vec::new();
    }
    object_fields(p, path, &root)
}

/// The fields of an object schema at `path`: its `properties`, in order, required as `required`
/// lists them.
fn object_fields(p: &mut Vec<FieldError>, path: &str, schema: &Node) -> Vec<Field> {
    if let Some(additional) = schema.get("additionalProperties")
        && !matches!(additional, Node::Bool(false))
    {
        let message = "only additionalProperties: false (a form's values are its fields, no others)";
        p.push(FieldError::new(format!("{path}/additionalProperties"), FieldCode::Invalid, message));
    }
    let required: Vec<String> = match schema.get("required") {
        None => Vec::new(),
        Some(Node::Array(names)) => names
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match n {
                Node::String(s) => Some(s.clone()),
                _ => {
                    p.push(FieldError::new(format!("{path}/required/{i}"), FieldCode::Type, "must be a string"));
                    None
                }
            })
            .collect(),
        Some(_) => {
            p.push(FieldError::new(format!("{path}/required"), FieldCode::Type, "must be an array of names"));
            Vec::new()
        }
    };
    let properties = match schema.get("properties") {
        Some(Node::Object(members)) => members.as_slice(),
        Some(_) => {
            p.push(FieldError::new(format!("{path}/properties"), FieldCode::Type, "must be an object"));
            &[]
        }
        None => &[],
    };
    for (i, name) in required.iter().enumerate() {
        if !properties.iter().any(|(k, _)| k == name) {
            let message = format!("{name:?} is required but not among the properties");
            p.push(FieldError::new(format!("{path}/required/{i}"), FieldCode::Invalid, message));
        }
    }
    properties
        .iter()
        .map(|(name, property)| {
            let at = format!("{path}/properties/{}", pointer_token(name));
            let mut field = property_field(p, &at, name, property);
            field.required = required.contains(name);
            field
        })
        .collect()
}

fn check_keywords(p: &mut Vec<FieldError>, path: &str, node: &Node, also: &[&str]) {
    let Node::Object(members) = node else { return };
    for (key, _) in members {
        let known =
            KEYWORDS.contains(&key.as_str()) || ARRAY_KEYWORDS.contains(&key.as_str()) || also.contains(&key.as_str());
        if !known {
            let message = format!("gatehouse does not enforce {key:?}; it is refused rather than ignored");
            p.push(FieldError::new(format!("{path}/{}", pointer_token(key)), FieldCode::Invalid, message));
        }
    }
}

/// One property as a field.
fn property_field(p: &mut Vec<FieldError>, at: &str, name: &str, schema: &Node) -> Field {
    let mut field = Field::plain(name, "", FieldKind::Text);
    if !matches!(schema, Node::Object(_)) {
        p.push(FieldError::new(at, FieldCode::Type, "a property's schema must be an object"));
        return field;
    }
    check_keywords(p, at, schema, &[]);
    let text = |p: &mut Vec<FieldError>, key: &str| match schema.get(key) {
        None => String::new(),
        Some(Node::String(s)) => s.clone(),
        Some(_) => {
            p.push(FieldError::new(format!("{at}/{key}"), FieldCode::Type, "must be a string"));
            String::new()
        }
    };
    field.label = text(p, "title");
    field.description = text(p, "description");
    field.default = schema.get("default").map(Node::value);
    let kind = text(p, "type");
    field.kind = match kind.as_str() {
        "string" if schema.get("enum").is_some() || schema.get("oneOf").is_some() => {
            field.options = options(p, at, schema);
            FieldKind::Select
        }
        "string" => {
            field.min_length = count(p, at, schema, "minLength");
            field.max_length = count(p, at, schema, "maxLength");
            match text(p, "format").as_str() {
                "" => FieldKind::Text,
                "email" => FieldKind::Email,
                "uri" => FieldKind::Url,
                "date" => FieldKind::Date,
                "date-time" => FieldKind::DateTime,
                other => {
                    let message = format!("format {other:?} is not one of email, uri, date, date-time");
                    p.push(FieldError::new(format!("{at}/format"), FieldCode::Invalid, message));
                    FieldKind::Text
                }
            }
        }
        "number" | "integer" => {
            field.minimum = number(p, at, schema, "minimum");
            field.maximum = number(p, at, schema, "maximum");
            if kind == "number" { FieldKind::Number } else { FieldKind::Integer }
        }
        "boolean" => FieldKind::Confirm,
        "object" => {
            field.fields = object_fields(p, at, schema);
            FieldKind::Group
        }
        "array" => {
            field.min_items = count(p, at, schema, "minItems");
            field.max_items = count(p, at, schema, "maxItems");
            if schema.get("uniqueItems").is_some_and(|u| !matches!(u, Node::Bool(_))) {
                p.push(FieldError::new(format!("{at}/uniqueItems"), FieldCode::Type, "must be a boolean"));
            }
            let items_at = format!("{at}/items");
            match schema.get("items") {
                Some(items) if items.get("type").is_some_and(|t| matches!(t, Node::String(s) if s == "object")) => {
                    check_keywords(p, &items_at, items, &[]);
                    field.fields = object_fields(p, &items_at, items);
                    FieldKind::List
                }
                Some(items) => {
                    check_keywords(p, &items_at, items, &["anyOf"]);
                    if items.get("type").is_some_and(|t| !matches!(t, Node::String(s) if s == "string")) {
                        let message = "an array holds strings (picks) or objects (rows)";
                        p.push(FieldError::new(format!("{items_at}/type"), FieldCode::Invalid, message));
                    }
                    field.options = options(p, &items_at, items);
                    FieldKind::MultiSelect
                }
                None => {
                    p.push(FieldError::new(items_at, FieldCode::Required, "an array needs its items"));
                    FieldKind::MultiSelect
                }
            }
        }
        "" => {
            p.push(FieldError::new(format!("{at}/type"), FieldCode::Required, "a property needs its type"));
            FieldKind::Text
        }
        other => {
            let message = format!("type {other:?} is not one of string, number, integer, boolean, object, array");
            p.push(FieldError::new(format!("{at}/type"), FieldCode::Invalid, message));
            FieldKind::Text
        }
    };
    if !matches!(field.kind, FieldKind::MultiSelect | FieldKind::List) {
        for key in ARRAY_KEYWORDS.iter().chain(["items", "minItems"].iter()) {
            if schema.get(key).is_some() {
                let message = format!("{key} belongs to an array");
                p.push(FieldError::new(format!("{at}/{key}"), FieldCode::Invalid, message));
            }
        }
    }
    field
}

/// A select's options: `enum` (with the legacy `enumNames` as labels), or `oneOf` / `anyOf` of
/// `{const, title}`.
fn options(p: &mut Vec<FieldError>, at: &str, schema: &Node) -> Vec<ChoiceOption> {
    let string = |p: &mut Vec<FieldError>, path: String, node: &Node| match node {
        Node::String(s) => s.clone(),
        _ => {
            p.push(FieldError::new(path, FieldCode::Type, "must be a string"));
            String::new()
        }
    };
    if let Some(values) = schema.get("enum") {
        let Node::Array(values) = values else {
            p.push(FieldError::new(format!("{at}/enum"), FieldCode::Type, "must be an array of strings"));
            return Vec::new();
        };
        let names = match schema.get("enumNames") {
            Some(Node::Array(names)) => names.clone(),
            _ => Vec::new(),
        };
        return values
            .iter()
            .enumerate()
            .map(|(i, v)| ChoiceOption {
                value: string(p, format!("{at}/enum/{i}"), v),
                label: names.get(i).map(|n| string(p, format!("{at}/enumNames/{i}"), n)).unwrap_or_default(),
            })
            .collect();
    }
    let (key, titled) = match (schema.get("oneOf"), schema.get("anyOf")) {
        (Some(titled), _) => ("oneOf", titled),
        (None, Some(titled)) => ("anyOf", titled),
        (None, None) => {
            p.push(FieldError::new(format!("{at}/enum"), FieldCode::Required, "a choice needs enum, oneOf or anyOf"));
            return Vec::new();
        }
    };
    let Node::Array(items) = titled else {
        p.push(FieldError::new(format!("{at}/{key}"), FieldCode::Type, "must be an array of {const, title}"));
        return Vec::new();
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let path = format!("{at}/{key}/{i}");
            if let Node::Object(members) = item {
                for (k, _) in members.iter().filter(|(k, _)| k != "const" && k != "title") {
                    let message = format!("an option has only const and title (got {k:?})");
                    p.push(FieldError::new(format!("{path}/{}", pointer_token(k)), FieldCode::Invalid, message));
                }
            }
            let value = match item.get("const") {
                Some(v) => string(p, format!("{path}/const"), v),
                None => string(p, format!("{path}/const"), &Node::Null),
            };
            let label = item.get("title").map(|t| string(p, format!("{path}/title"), t)).unwrap_or_default();
            ChoiceOption { value, label }
        })
        .collect()
}

fn count(p: &mut Vec<FieldError>, at: &str, schema: &Node, key: &str) -> Option<u64> {
    match schema.get(key)? {
        Node::Number(n) if n.as_u64().is_some() => n.as_u64(),
        _ => {
            p.push(FieldError::new(format!("{at}/{key}"), FieldCode::Type, "must be a non-negative integer"));
            None
        }
    }
}

fn number(p: &mut Vec<FieldError>, at: &str, schema: &Node, key: &str) -> Option<Number> {
    match schema.get(key)? {
        Node::Number(n) => Some(n.clone()),
        _ => {
            p.push(FieldError::new(format!("{at}/{key}"), FieldCode::Type, "must be a number"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn translate(schema: &str) -> (Vec<Field>, Vec<(String, FieldCode)>) {
        let mut p = Vec::new();
        let fields = fields(&mut p, "/json_schema", schema);
        (fields, p.into_iter().map(|f| (f.path, f.code)).collect())
    }

    #[test]
    fn mcp_primitives_and_nesting_keep_their_order() {
        let (fields, problems) = translate(
            r#"{"type":"object","properties":{
                "zeta":{"type":"string","minLength":2,"format":"email","title":"Mail"},
                "alpha":{"type":"integer","minimum":1,"maximum":9,"default":3},
                "ok":{"type":"boolean"},
                "env":{"type":"string","oneOf":[{"const":"p","title":"Prod"}]},
                "old":{"type":"string","enum":["a","b"],"enumNames":["A","B"]},
                "tags":{"type":"array","items":{"type":"string","enum":["x","y"]},"maxItems":2},
                "rows":{"type":"array","items":{"type":"object","properties":{"q":{"type":"number"}},"required":["q"]}},
                "who":{"type":"object","properties":{"name":{"type":"string"}}}
            },"required":["zeta"]}"#,
        );
        assert_eq!(problems, []);
        let names: Vec<_> = fields.iter().map(|f| (f.name.as_str(), f.kind)).collect();
        use FieldKind::*;
        assert_eq!(
            names,
            [
                ("zeta", Email),
                ("alpha", Integer),
                ("ok", Confirm),
                ("env", Select),
                ("old", Select),
                ("tags", MultiSelect),
                ("rows", List),
                ("who", Group)
            ]
        );
        assert!(fields[0].required && fields[0].label == "Mail" && fields[0].min_length == Some(2));
        assert_eq!(fields[3].options[0].label, "Prod");
        assert_eq!(fields[4].options[1].label, "B");
        assert!(fields[6].fields[0].required);
    }

    #[test]
    fn unenforced_keywords_are_refused_where_they_stand() {
        let (_, problems) = translate(
            r#"{"type":"object","properties":{"a":{"type":"string","pattern":"x"},"b":{"type":"null"},
                "c":{"type":"string","format":"ipv4"}},"required":["d"],"additionalProperties":true}"#,
        );
        assert_eq!(
            problems,
            [
                ("/json_schema/additionalProperties".into(), FieldCode::Invalid),
                ("/json_schema/required/0".into(), FieldCode::Invalid),
                ("/json_schema/properties/a/pattern".into(), FieldCode::Invalid),
                ("/json_schema/properties/b/type".into(), FieldCode::Invalid),
                ("/json_schema/properties/c/format".into(), FieldCode::Invalid),
            ]
        );
    }
}
