//! The form gate (`harness.form`): typed fields for a person to fill in. One schema model, the
//! envelope's `prompt.schema.fields`, serves both ways of asking: the harness's fields (with
//! additive kinds and constraints) and a JSON Schema (`json_schema.rs` translates it). This
//! module checks a schema at the open and an answer's values against it before the claim; every
//! problem is reported at its JSON Pointer.

use std::collections::{BTreeMap, HashSet};

use serde::Serialize;
use serde_json::{Map, Number, Value};

use super::fields::{FieldCode, FieldError, check_length, pointer_token};
use super::gate::{Control, FORM, Field, FieldKind, Gate, LOOP, Prompt, ResponsePolicy, SESSION, Schema, Subject};
use super::ids::{GateId, LoopId, StepId, ToolExecutionId, TurnId};

pub const DEFAULT_TITLE: &str = "Input requested";
/// Fields at each level of a form (the harness's bound for its flat forms).
pub const MAX_FIELDS: usize = 32;
/// Fields in the whole tree of a form.
pub const MAX_TOTAL_FIELDS: usize = 128;
/// Levels of fields: top-level, inside a group or list, and one level deeper.
pub const MAX_DEPTH: usize = 3;
pub const MAX_NAME_BYTES: usize = 128;
pub const MAX_LABEL_BYTES: usize = 256;
pub const MAX_DESCRIPTION_BYTES: usize = 1024;
pub const MAX_OPTIONS: usize = 64;
pub const MAX_OPTION_BYTES: usize = 256;
/// Rows of a list, picks of a multi-select.
pub const MAX_ITEMS: u64 = 100;
/// Any one string of an answer, and the JSON text of each top-level value (the harness bounds
/// each audited value so).
pub const MAX_VALUE_BYTES: usize = 4096;

pub const ACCEPT: &str = "accept";
pub const DECLINE: &str = "decline";
pub const CANCEL: &str = "cancel";
/// The actions of a form and of an open-URL gate.
pub const ACTIONS: [&str; 3] = [ACCEPT, DECLINE, CANCEL];

/// A validated form: who owns it (a loop's tool call, or nobody: the host waits on it) and the
/// content that decides whether a loop's re-ask is the same form.
#[derive(Debug, Clone, PartialEq)]
pub struct Form {
    pub owner: Option<(LoopId, ToolExecutionId)>,
    pub content: FormContent,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FormContent {
    pub title: String,
    pub body: String,
    pub fields: Vec<Field>,
    pub turn_id: Option<TurnId>,
    pub step_id: Option<StepId>,
    pub response_policy: Option<ResponsePolicy>,
}

impl Form {
    /// The envelope of the gate this form opens.
    pub fn gate(&self, id: GateId) -> Gate {
        let c = &self.content;
        let (resolver, blocks) = match self.owner {
            Some(_) => (LOOP, "tool_call"),
            None => (SESSION, "session"),
        };
        Gate {
            id,
            kind: FORM.into(),
            resolver: resolver.into(),
            blocks: blocks.into(),
            effect: "resume".into(),
            subject: Subject { tool_execution_id: self.owner.map(|(_, t)| t), turn_id: c.turn_id, step_id: c.step_id },
            prompt: Prompt {
                title: c.title.clone(),
                body: c.body.clone(),
                origin: None,
                schema: Some(Schema { fields: c.fields.clone() }),
                controls: controls("Submit"),
                requires_completion: false,
            },
            response_policy: c.response_policy.clone(),
            restorable: false,
            tool_call: None,
        }
    }
}

/// `accept`, `decline` and `cancel`, in the harness's labels (the accept label is the kind's).
pub fn controls(accept: &str) -> Vec<Control> {
    vec![
        Control { action: ACCEPT.into(), label: accept.into() },
        Control { action: DECLINE.into(), label: "Decline".into() },
        Control { action: CANCEL.into(), label: "Cancel".into() },
    ]
}

/// Checks a form's fields (as the open request gave them, at `path`) and normalises them: labels
/// default to names, option labels to values. `harness` marks the harness's own field list,
/// whose required text must be non-empty (a JSON Schema's `required` only asks for presence).
pub fn check_fields(p: &mut Vec<FieldError>, path: &str, fields: &mut [Field], harness: bool) {
    let mut total = 0;
    check_level(p, path, fields, 1, &mut total, harness);
    if total > MAX_TOTAL_FIELDS {
        let message = format!("a form has at most {MAX_TOTAL_FIELDS} fields in all (got {total})");
        p.push(FieldError::new(path, FieldCode::OutOfRange, message));
    }
}

fn check_level(
    p: &mut Vec<FieldError>,
    path: &str,
    fields: &mut [Field],
    depth: usize,
    total: &mut usize,
    harness: bool,
) {
    *total += fields.len();
    if fields.is_empty() || fields.len() > MAX_FIELDS {
        let message = format!("1 to {MAX_FIELDS} fields (got {})", fields.len());
        p.push(FieldError::new(path, FieldCode::OutOfRange, message));
    }
    let mut names = HashSet::new();
    for (i, field) in fields.iter_mut().enumerate() {
        let at = format!("{path}/{i}");
        if let Some(problem) = check_length(&format!("{at}/name"), &field.name, MAX_NAME_BYTES, "a field name") {
            p.push(problem);
        } else if !names.insert(field.name.clone()) {
            p.push(FieldError::new(format!("{at}/name"), FieldCode::Duplicate, "field names must be distinct"));
        }
        if field.label.is_empty() {
            field.label = field.name.clone();
        }
        bounded(p, &format!("{at}/label"), &field.label, MAX_LABEL_BYTES);
        bounded(p, &format!("{at}/description"), &field.description, MAX_DESCRIPTION_BYTES);
        check_constraints(p, &at, field);
        if harness && field.required && field.kind == FieldKind::Text {
            field.min_length = Some(field.min_length.unwrap_or(0).max(1));
        }
        if matches!(field.kind, FieldKind::Group | FieldKind::List) {
            if depth >= MAX_DEPTH {
                let message = format!("fields nest at most {MAX_DEPTH} levels deep");
                p.push(FieldError::new(format!("{at}/fields"), FieldCode::OutOfRange, message));
            } else {
                check_level(p, &format!("{at}/fields"), &mut field.fields, depth + 1, total, harness);
            }
        }
        if let Some(default) = &field.default {
            let mut problems = Vec::new();
            check_value(&mut problems, &format!("{at}/default"), field, default);
            p.extend(problems);
        }
    }
}

fn bounded(p: &mut Vec<FieldError>, path: &str, text: &str, max: usize) {
    if text.len() > max {
        let message = format!("must be at most {max} bytes (got {})", text.len());
        p.push(FieldError::new(path, FieldCode::TooLong, message));
    }
}

/// Each constraint belongs to some kinds only; a constraint on another kind is refused, never
/// ignored, and bounds must be in order.
fn check_constraints(p: &mut Vec<FieldError>, at: &str, field: &mut Field) {
    use FieldKind::*;
    let kind = field.kind;
    let textual = matches!(kind, Text | Email | Url);
    let numeric = matches!(kind, Number | Integer);
    let counted = matches!(kind, MultiSelect | List);
    let chosen = matches!(kind, Select | MultiSelect);
    let nested = matches!(kind, Group | List);
    let mut foreign = |member: &str, present: bool, belongs: bool| {
        if present && !belongs {
            let message = format!("{member} is not a constraint of a {kind:?} field");
            p.push(FieldError::new(format!("{at}/{member}"), FieldCode::UnknownKey, message));
        }
    };
    foreign("options", !field.options.is_empty(), chosen);
    foreign("fields", !field.fields.is_empty(), nested);
    foreign("min_length", field.min_length.is_some(), textual);
    foreign("max_length", field.max_length.is_some(), textual);
    foreign("minimum", field.minimum.is_some(), numeric);
    foreign("maximum", field.maximum.is_some(), numeric);
    foreign("min_items", field.min_items.is_some(), counted);
    foreign("max_items", field.max_items.is_some(), counted);
    foreign("allow_other", field.allow_other, false);
    if chosen {
        check_options(p, at, field);
    }
    if nested && field.fields.is_empty() {
        p.push(FieldError::new(format!("{at}/fields"), FieldCode::Required, "a group or list needs its fields"));
    }
    let mut order = |low: &str, high: &str, ordered: bool| {
        if !ordered {
            p.push(FieldError::new(format!("{at}/{high}"), FieldCode::OutOfRange, format!("{high} is below {low}")));
        }
    };
    if let (Some(low), Some(high)) = (field.min_length, field.max_length) {
        order("min_length", "max_length", low <= high);
    }
    if let (Some(low), Some(high)) = (&field.minimum, &field.maximum) {
        order("minimum", "maximum", compare(low, high) != Some(std::cmp::Ordering::Greater));
    }
    if let (Some(low), Some(high)) = (field.min_items, field.max_items) {
        order("min_items", "max_items", low <= high);
    }
    for (member, value) in [("min_items", field.min_items), ("max_items", field.max_items)] {
        if value.is_some_and(|n| n > MAX_ITEMS) {
            let message = format!("at most {MAX_ITEMS}");
            p.push(FieldError::new(format!("{at}/{member}"), FieldCode::OutOfRange, message));
        }
    }
}

fn check_options(p: &mut Vec<FieldError>, at: &str, field: &mut Field) {
    let n = field.options.len();
    if n == 0 || n > MAX_OPTIONS {
        let message = format!("1 to {MAX_OPTIONS} options (got {n})");
        p.push(FieldError::new(format!("{at}/options"), FieldCode::OutOfRange, message));
    }
    let mut values = HashSet::new();
    for (j, option) in field.options.iter_mut().enumerate() {
        let path = format!("{at}/options/{j}/value");
        if let Some(problem) = check_length(&path, &option.value, MAX_OPTION_BYTES, "an option's value") {
            p.push(problem);
        } else if !values.insert(option.value.clone()) {
            p.push(FieldError::new(path, FieldCode::Duplicate, "option values must be distinct"));
        }
        if option.label.is_empty() {
            option.label = option.value.clone();
        }
        bounded(p, &format!("{at}/options/{j}/label"), &option.label, MAX_OPTION_BYTES);
    }
}

/// An accepted form's values, checked against its fields (at `/values`). A `null` counts as
/// absent (the harness's rule); keys that are not fields are refused, at every level.
pub fn check_values(fields: &[Field], values: &Map<String, Value>) -> Result<Map<String, Value>, Vec<FieldError>> {
    let mut p = Vec::new();
    let checked = check_object(&mut p, "/values", fields, values);
    for (name, value) in &checked {
        let length = value_text(value).len();
        if length > MAX_VALUE_BYTES {
            let message = format!("a value's JSON text is at most {MAX_VALUE_BYTES} bytes (got {length})");
            p.push(FieldError::new(format!("/values/{}", pointer_token(name)), FieldCode::TooLong, message));
        }
    }
    if p.is_empty() { Ok(checked) } else { Err(p) }
}

/// The object of `fields` at `path`: the present values, in field order.
fn check_object(
    p: &mut Vec<FieldError>,
    path: &str,
    fields: &[Field],
    object: &Map<String, Value>,
) -> Map<String, Value> {
    for key in object.keys().filter(|k| !fields.iter().any(|f| f.name == **k)) {
        let message = format!("{key:?} is not a field of this form");
        p.push(FieldError::new(format!("{path}/{}", pointer_token(key)), FieldCode::UnknownKey, message));
    }
    let mut checked = Map::new();
    for field in fields {
        let at = format!("{path}/{}", pointer_token(&field.name));
        match object.get(&field.name).filter(|v| !v.is_null()) {
            None if field.required => p.push(FieldError::new(at, FieldCode::Required, "this field is required")),
            None => {}
            Some(value) => {
                check_value(p, &at, field, value);
                checked.insert(field.name.clone(), value.clone());
            }
        }
    }
    checked
}

/// One value of `field`, at `path`.
fn check_value(p: &mut Vec<FieldError>, path: &str, field: &Field, value: &Value) {
    use FieldKind::*;
    let mismatch = |p: &mut Vec<FieldError>, what: &str| {
        p.push(FieldError::new(path, FieldCode::Type, format!("must be {what}")));
    };
    match (field.kind, value) {
        (Text | Email | Url | Date | DateTime, Value::String(s)) => check_string(p, path, field, s),
        (Select, Value::String(s)) => {
            if !field.options.iter().any(|o| o.value == *s) {
                not_a_choice(p, path, field);
            }
        }
        (MultiSelect, Value::Array(items)) => {
            let mut seen = HashSet::new();
            for (i, item) in items.iter().enumerate() {
                let at = format!("{path}/{i}");
                match item {
                    Value::String(s) if !field.options.iter().any(|o| o.value == *s) => not_a_choice(p, &at, field),
                    Value::String(s) if !seen.insert(s) => {
                        p.push(FieldError::new(at, FieldCode::Duplicate, "each choice at most once"))
                    }
                    Value::String(_) => {}
                    _ => p.push(FieldError::new(at, FieldCode::Type, "must be a string")),
                }
            }
            check_count(p, path, field, items.len());
        }
        (Confirm, Value::Bool(_)) => {}
        (Number, Value::Number(n)) => check_bounds(p, path, field, n),
        (Integer, Value::Number(n)) => match is_integral(n) {
            true => check_bounds(p, path, field, n),
            false => mismatch(p, "an integer"),
        },
        (Group, Value::Object(object)) => {
            check_object(p, path, &field.fields, object);
        }
        (List, Value::Array(rows)) => {
            for (i, row) in rows.iter().enumerate() {
                let at = format!("{path}/{i}");
                match row {
                    Value::Object(object) => {
                        check_object(p, &at, &field.fields, object);
                    }
                    _ => p.push(FieldError::new(at, FieldCode::Type, "must be an object (one row)")),
                }
            }
            check_count(p, path, field, rows.len());
        }
        (Text | Email | Url | Date | DateTime | Select, _) => mismatch(p, "a string"),
        (MultiSelect, _) => mismatch(p, "an array of strings"),
        (Confirm, _) => mismatch(p, "a boolean"),
        (Number, _) => mismatch(p, "a number"),
        (Integer, _) => mismatch(p, "an integer"),
        (Group, _) => mismatch(p, "an object"),
        (List, _) => mismatch(p, "an array of objects"),
    }
}

fn not_a_choice(p: &mut Vec<FieldError>, path: &str, field: &Field) {
    let choices: Vec<&str> = field.options.iter().map(|o| o.value.as_str()).collect();
    p.push(FieldError::new(path, FieldCode::NotAChoice, format!("must be one of {choices:?}")));
}

fn check_string(p: &mut Vec<FieldError>, path: &str, field: &Field, s: &str) {
    if s.len() > MAX_VALUE_BYTES {
        let message = format!("must be at most {MAX_VALUE_BYTES} bytes (got {})", s.len());
        p.push(FieldError::new(path, FieldCode::TooLong, message));
        return;
    }
    // Lengths in characters (Unicode scalar values), as JSON Schema counts them.
    let length = s.chars().count() as u64;
    if field.min_length.is_some_and(|min| length < min) || field.max_length.is_some_and(|max| length > max) {
        let message = match (field.min_length, field.max_length) {
            (Some(min), Some(max)) => format!("{min} to {max} characters (got {length})"),
            (Some(min), None) => format!("at least {min} characters (got {length})"),
            (_, max) => format!("at most {} characters (got {length})", max.unwrap_or_default()),
        };
        p.push(FieldError::new(path, FieldCode::OutOfRange, message));
    }
    let well_formed = match field.kind {
        FieldKind::Email => is_email(s),
        FieldKind::Url => url::Url::parse(s).is_ok(),
        FieldKind::Date => is_date(s),
        FieldKind::DateTime => is_date_time(s),
        _ => true,
    };
    if !well_formed {
        let what = match field.kind {
            FieldKind::Email => "an email address (name@domain)",
            FieldKind::Url => "an absolute URL",
            FieldKind::Date => "a date (YYYY-MM-DD)",
            _ => "an RFC 3339 date-time (YYYY-MM-DDTHH:MM:SSZ)",
        };
        p.push(FieldError::new(path, FieldCode::Invalid, format!("must be {what}")));
    }
}

fn check_count(p: &mut Vec<FieldError>, path: &str, field: &Field, n: usize) {
    let (min, max) = (field.min_items.unwrap_or(0), field.max_items.unwrap_or(MAX_ITEMS));
    let n = n as u64;
    if n < min || n > max {
        p.push(FieldError::new(path, FieldCode::OutOfRange, format!("{min} to {max} items (got {n})")));
    }
}

fn check_bounds(p: &mut Vec<FieldError>, path: &str, field: &Field, n: &Number) {
    use std::cmp::Ordering::{Greater, Less};
    if let Some(min) = field.minimum.as_ref().filter(|min| compare(n, min) == Some(Less)) {
        p.push(FieldError::new(path, FieldCode::OutOfRange, format!("at least {min}")));
    }
    if let Some(max) = field.maximum.as_ref().filter(|max| compare(n, max) == Some(Greater)) {
        p.push(FieldError::new(path, FieldCode::OutOfRange, format!("at most {max}")));
    }
}

/// Two JSON numbers in order: exactly when both are integers (beyond 2^53 a float cannot tell
/// neighbours apart), else as floats.
fn compare(a: &Number, b: &Number) -> Option<std::cmp::Ordering> {
    let integer = |n: &Number| n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from));
    match (integer(a), integer(b)) {
        (Some(a), Some(b)) => Some(a.cmp(&b)),
        _ => as_f64(a).partial_cmp(&as_f64(b)),
    }
}

fn as_f64(n: &Number) -> f64 {
    n.as_f64().unwrap_or(f64::NAN)
}

/// 3 and 3.0 are both integers, as JSON Schema has it.
fn is_integral(n: &Number) -> bool {
    n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|x| x.is_finite() && x.fract() == 0.0)
}

/// `name@domain`: one `@` with something on each side and no whitespace (a plausibility check;
/// only a mail that arrives proves an address).
fn is_email(s: &str) -> bool {
    match s.split_once('@') {
        Some((local, domain)) => {
            !local.is_empty() && !domain.is_empty() && !domain.contains('@') && !s.chars().any(char::is_whitespace)
        }
        None => false,
    }
}

/// RFC 3339 `full-date`: `YYYY-MM-DD`, a day that exists.
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let number = |range: std::ops::Range<usize>| {
        s.get(range).filter(|d| d.bytes().all(|c| c.is_ascii_digit()))?.parse::<u32>().ok()
    };
    let (Some(year), Some(month), Some(day)) = (number(0..4), number(5..7), number(8..10)) else { return false };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&day)
}

/// RFC 3339 `date-time`: `full-date "T" HH:MM:SS[.frac] (Z | ±HH:MM)`.
fn is_date_time(s: &str) -> bool {
    let Some((date, time)) = s.split_once(['T', 't']) else { return false };
    if !is_date(date) {
        return false;
    }
    let two = |t: &str, max: u32| {
        t.len() == 2 && t.bytes().all(|c| c.is_ascii_digit()) && t.parse::<u32>().is_ok_and(|n| n <= max)
    };
    let (clock, offset) = match time.find(['Z', 'z', '+', '-']) {
        Some(i) => time.split_at(i),
        None => return false,
    };
    let offset_ok = match offset {
        "Z" | "z" => true,
        _ => {
            offset.len() == 6
                && offset.as_bytes()[3] == b':'
                && offset.get(1..3).is_some_and(|h| two(h, 23))
                && offset.get(4..6).is_some_and(|m| two(m, 59))
        }
    };
    let (hms, fraction) = match clock.split_once('.') {
        Some((hms, fraction)) => (hms, Some(fraction)),
        None => (clock, None),
    };
    let parts: Vec<&str> = hms.split(':').collect();
    offset_ok
        && fraction.is_none_or(|f| !f.is_empty() && f.bytes().all(|c| c.is_ascii_digit()))
        && parts.len() == 3
        && two(parts[0], 23)
        && two(parts[1], 59)
        && two(parts[2], 60)
}

/// A value as the audit writes it: a string verbatim, anything else as compact JSON text
/// (`true`, `3.5`, `["a","b"]`).
fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// What `GateResolved` keeps of an accepted form (harness `form.values`): each value as text,
/// by field name (sorted).
pub fn audit_values(values: &Map<String, Value>) -> BTreeMap<String, String> {
    values.iter().map(|(name, value)| (name.clone(), value_text(value))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::gate::ChoiceOption;

    fn field(name: &str, kind: FieldKind) -> Field {
        Field::plain(name, "", kind)
    }

    fn codes(fields: &[Field], values: Value) -> Vec<(String, FieldCode)> {
        let Value::Object(values) = values else { panic!() };
        match check_values(fields, &values) {
            Ok(_) => Vec::new(),
            Err(problems) => problems.into_iter().map(|f| (f.path, f.code)).collect(),
        }
    }

    #[test]
    fn every_kind_takes_its_own_json_type() {
        let mut select = field("env", FieldKind::Select);
        select.options = vec![ChoiceOption { value: "prod".into(), label: "".into() }];
        let mut pick = field("tags", FieldKind::MultiSelect);
        pick.options = select.options.clone();
        let mut row = field("rows", FieldKind::List);
        row.fields = vec![field("qty", FieldKind::Integer)];
        let fields = vec![
            field("note", FieldKind::Text),
            select,
            pick,
            field("ok", FieldKind::Confirm),
            field("n", FieldKind::Number),
            field("i", FieldKind::Integer),
            field("day", FieldKind::Date),
            field("at", FieldKind::DateTime),
            field("mail", FieldKind::Email),
            field("site", FieldKind::Url),
            row,
        ];
        let good = serde_json::json!({"note": "x", "env": "prod", "tags": ["prod"], "ok": false, "n": 1.5, "i": 3.0,
            "day": "2024-02-29", "at": "2026-12-03T10:00:00.5+01:00", "mail": "a@b", "site": "https://x.test/a",
            "rows": [{"qty": 2}]});
        assert_eq!(codes(&fields, good), []);
        let bad = serde_json::json!({"note": 1, "env": "dev", "tags": ["prod", "prod"], "ok": "yes", "n": "1",
            "i": 1.5, "day": "2023-02-29", "at": "2026-12-03 10:00", "mail": "ab", "site": "/relative",
            "rows": [{"qty": 1, "x": 1}, 5], "extra": true});
        let got = codes(&fields, bad);
        let expected = [
            ("/values/extra", FieldCode::UnknownKey),
            ("/values/note", FieldCode::Type),
            ("/values/env", FieldCode::NotAChoice),
            ("/values/tags/1", FieldCode::Duplicate),
            ("/values/ok", FieldCode::Type),
            ("/values/n", FieldCode::Type),
            ("/values/i", FieldCode::Type),
            ("/values/day", FieldCode::Invalid),
            ("/values/at", FieldCode::Invalid),
            ("/values/mail", FieldCode::Invalid),
            ("/values/site", FieldCode::Invalid),
            ("/values/rows/0/x", FieldCode::UnknownKey),
            ("/values/rows/1", FieldCode::Type),
        ];
        assert_eq!(got, expected.map(|(p, c)| (p.to_owned(), c)));
    }

    #[test]
    fn integer_bounds_are_exact_beyond_what_a_float_holds() {
        let fields = [Field { maximum: Some(9_007_199_254_740_992_u64.into()), ..field("n", FieldKind::Integer) }];
        assert_eq!(
            codes(&fields, serde_json::json!({"n": 9_007_199_254_740_993_u64})),
            [("/values/n".into(), FieldCode::OutOfRange)]
        );
        assert_eq!(codes(&fields, serde_json::json!({"n": 9_007_199_254_740_992_u64})), []);
    }

    #[test]
    fn schemas_are_bounded_and_constraints_belong_to_their_kinds() {
        let mut fields = vec![field("a", FieldKind::Text), field("a", FieldKind::Select), field("c", FieldKind::Group)];
        fields[0].minimum = Some(1.into());
        let mut p = Vec::new();
        check_fields(&mut p, "/schema/fields", &mut fields, true);
        let got: Vec<_> = p.iter().map(|f| (f.path.as_str(), f.code)).collect();
        assert_eq!(
            got,
            [
                ("/schema/fields/0/minimum", FieldCode::UnknownKey),
                ("/schema/fields/1/name", FieldCode::Duplicate),
                ("/schema/fields/1/options", FieldCode::OutOfRange),
                ("/schema/fields/2/fields", FieldCode::Required),
                ("/schema/fields/2/fields", FieldCode::OutOfRange),
            ]
        );
        assert_eq!(fields[1].label, "a", "a label defaults to the name");
    }

    #[test]
    fn a_required_harness_text_must_not_be_empty_and_nulls_are_absent() {
        let mut fields = vec![Field { required: true, ..field("t", FieldKind::Text) }, field("o", FieldKind::Text)];
        check_fields(&mut Vec::new(), "/schema/fields", &mut fields, true);
        assert_eq!(
            codes(&fields, serde_json::json!({"t": "", "o": null})),
            [("/values/t".into(), FieldCode::OutOfRange)]
        );
        assert_eq!(codes(&fields, serde_json::json!({"o": "x"})), [("/values/t".into(), FieldCode::Required)]);
    }

    #[test]
    fn audit_values_are_text_by_sorted_name() {
        let values = serde_json::json!({"z": true, "a": "x", "m": [1, 2]});
        let audit = audit_values(values.as_object().unwrap());
        assert_eq!(serde_json::to_string(&audit).unwrap(), r#"{"a":"x","m":"[1,2]","z":"true"}"#);
    }
}
