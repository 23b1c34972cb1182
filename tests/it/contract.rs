//! Contract checks for the integration tests.
//!
//! There are two sources of truth. `openapi.yaml` is our own contract: schemathesis tests it in CI,
//! and curl users read it. The looprig harness schemas are the wire that we promise to stay
//! compatible with. Tests pass every HTTP response through [`check_response`], so a drift between
//! the server and its documentation fails the test that caused it, close to the cause.
//!
//! Validators are compiled lazily and cached. Compiling a schema costs far more than one
//! validation, and this runs on every response of the test suite.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use jsonschema::error::ValidationErrorKind;
use jsonschema::{Draft, Registry, ValidationError, Validator};
use serde_json::{Map, Value, json};

/// The repository's own contract. It is read at run time rather than with `include_str!`, so that
/// an edited document is checked without rebuilding the test binary.
const OPENAPI_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml");

/// The harness's own wire schemas, copied into the repository with their licence.
const HARNESS_SCHEMA_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/harness-wire/schema/");

/// The operation keys of an OpenAPI path item. The item's other keys (`parameters`, `summary`, …)
/// are not operations.
const OPERATION_KEYS: [&str; 8] = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

/// A failure message quotes at most this many bytes of a response body.
const BODY_EXCERPT: usize = 2048;

/// The parsed `openapi.yaml`, as JSON.
pub fn openapi() -> &'static Value {
    static DOCUMENT: LazyLock<Value> = LazyLock::new(|| {
        let text = std::fs::read_to_string(OPENAPI_FILE).unwrap_or_else(|e| panic!("cannot read {OPENAPI_FILE}: {e}"));
        serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{OPENAPI_FILE} is not valid YAML: {e}"))
    });
    &DOCUMENT
}

/// Every documented operation, as (upper-case method, path template, its `x-roles` joined by
/// commas, or `<none>`).
pub fn documented_operations() -> BTreeSet<(String, String, String)> {
    paths()
        .iter()
        .flat_map(|(template, item)| {
            OPERATION_KEYS.iter().filter_map(|key| item.get(*key).map(|op| (key, op))).map(|(key, op)| {
                let roles = op["x-roles"].as_array().map_or_else(
                    || "<none>".to_owned(),
                    |roles| roles.iter().map(|r| r.as_str().unwrap_or("<not a string>")).collect::<Vec<_>>().join(","),
                );
                (key.to_ascii_uppercase(), template.clone(), roles)
            })
        })
        .collect()
}

/// Panics unless the response is one the contract documents.
///
/// These must all hold:
/// - `path` matches a path template;
/// - the template has an operation for `method`;
/// - that operation documents `status`;
/// - the media type is one it documents;
/// - a JSON body validates against the documented schema.
///
/// Other documented media types are accepted without looking at the body: a `text/event-stream`
/// never ends, so a test passes in whatever part of it it read, and its frames are the test's own
/// business. A query string in `path` is ignored.
///
/// Unknown routes (JSON 404 `not_found`) and wrong methods (JSON 405 `method_not_allowed`) are
/// documented once, in the top-level description, not per path. They are therefore accepted only
/// with exactly that status and code. A `HEAD` request is checked as the `GET` it mirrors, without
/// a body.
pub fn check_response(method: &str, path: &str, status: u16, content_type: Option<&str>, body: &[u8]) {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let what = format!("{method} {path} -> {status}");

    let Some(template) = match_template(path) else {
        check_global_error(&what, status, 404, "not_found", content_type, body);
        return;
    };
    let item = &paths()[template];
    let mut key = method.to_ascii_lowercase();
    let mut expect_body = true;
    if item.get(&key).is_none() && key == "head" && item.get("get").is_some() {
        key = "get".to_owned();
        expect_body = false;
    }
    // Path items also hold non-operation keys such as `parameters`.
    let operation = OPERATION_KEYS.contains(&key.as_str()).then(|| item.get(&key)).flatten();
    let Some(operation) = operation else {
        check_global_error(&what, status, 405, "method_not_allowed", content_type, body);
        return;
    };
    let operation_id = operation["operationId"].as_str().unwrap_or("<no operationId>");
    let what = format!("{what} ({operation_id}, {template})");

    let responses =
        operation["responses"].as_object().unwrap_or_else(|| panic!("{what}: the operation documents no responses"));
    let code = status.to_string();
    let range = format!("{}XX", status / 100);
    let Some(status_key) = [code.as_str(), range.as_str(), "default"].into_iter().find(|k| responses.contains_key(*k))
    else {
        let documented: Vec<&String> = responses.keys().collect();
        panic!("{what}: status {status} is not documented (documented: {documented:?})\nbody: {}", excerpt(body));
    };
    let (response, response_pointer) =
        resolve(&format!("/paths/{}/{key}/responses/{status_key}", escape_pointer(template)));

    let content = response.get("content").and_then(Value::as_object).filter(|media| !media.is_empty());
    let Some(content) = content else {
        assert!(
            body.is_empty(),
            "{what}: the response documents no body, but got {} bytes: {}",
            body.len(),
            excerpt(body)
        );
        return;
    };
    let content_type = content_type.unwrap_or_else(|| {
        panic!("{what}: no Content-Type, but the response documents {:?}", content.keys().collect::<Vec<_>>())
    });
    let essence = media_type_essence(content_type);
    let Some((media_key, media)) = content.iter().find(|(documented, _)| documented.eq_ignore_ascii_case(&essence))
    else {
        panic!(
            "{what}: Content-Type {content_type:?} is not documented (documented: {:?})",
            content.keys().collect::<Vec<_>>()
        );
    };
    if !expect_body || is_event_stream(media_key) || !is_json(media_key) || media.get("schema").is_none() {
        return;
    }
    let instance: Value = serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{what}: the body is not JSON ({e}): {}", excerpt(body)));
    let schema_pointer = format!("{response_pointer}/content/{}/schema", escape_pointer(media_key));
    let validator = openapi_validator(&schema_pointer);
    let errors = describe_errors(validator.iter_errors(&instance));
    assert!(
        errors.is_empty(),
        "{what}: the body does not match {schema_pointer}:\n{}\nbody: {}",
        errors.join("\n"),
        excerpt(body)
    );
}

/// Panics unless one frame read from the event stream at `path` (a `GET`) is one the contract
/// documents: the frame, as `SseFrame::to_json` gives it, must validate against the items of the
/// stream's `contentSchema` (see `SseFrames` in the contract).
pub fn check_stream_frame(path: &str, frame: &Value) {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let template = match_template(path).unwrap_or_else(|| panic!("{path}: no documented path streams"));
    let (response, response_pointer) = resolve(&format!("/paths/{}/get/responses/200", escape_pointer(template)));
    assert!(
        response["content"].get("text/event-stream").is_some(),
        "{path} ({template}): the contract documents no event stream"
    );
    let items = format!("{response_pointer}/content/text~1event-stream/schema/contentSchema/items");
    let errors = describe_errors(openapi_validator(&items).iter_errors(frame));
    assert!(errors.is_empty(), "{path}: a frame does not match #{items}:\n{}\nframe: {frame}", errors.join("\n"));
}

/// Panics, listing every validation error, unless `instance` is valid under the harness schema
/// named `schema_file` (for example `event_journal_page.schema.json`).
pub fn assert_harness(schema_file: &str, instance: &Value) {
    let validator = harness_validator(schema_file);
    let errors = describe_errors(validator.iter_errors(instance));
    assert!(
        errors.is_empty(),
        "not valid under the harness schema {schema_file}:\n{}\ninstance: {}",
        errors.join("\n"),
        truncate(&instance.to_string(), BODY_EXCERPT)
    );
}

/// Checks that `openapi.yaml` is consistent with itself. Panics with every problem found.
///
/// - Every schema example and every media-type example validates against its schema.
/// - Every response schema compiles, so all of its `$ref`s resolve.
/// - `operationId`s are unique.
pub fn self_check() {
    let document = openapi();
    let mut problems = Vec::new();

    if let Some(schemas) = document["components"]["schemas"].as_object() {
        for (name, schema) in schemas {
            let pointer = format!("/components/schemas/{}", escape_pointer(name));
            for (i, example) in array(&schema["examples"]).iter().enumerate() {
                let errors = describe_errors(openapi_validator(&pointer).iter_errors(example));
                if !errors.is_empty() {
                    problems.push(format!("{pointer}/examples/{i}:\n{}", errors.join("\n")));
                }
            }
        }
    }

    let mut operation_ids = BTreeSet::new();
    // Operations share component responses; check each of them once.
    let mut visited = BTreeSet::new();
    for (method, template, _) in documented_operations() {
        let key = method.to_ascii_lowercase();
        let operation_pointer = format!("/paths/{}/{key}", escape_pointer(&template));
        let operation = &document.pointer(&operation_pointer).expect("a listed operation");
        match operation["operationId"].as_str() {
            Some(id) if !operation_ids.insert(id.to_owned()) => {
                problems.push(format!("{operation_pointer}: duplicate operationId {id}"));
            }
            Some(_) => {}
            None => problems.push(format!("{operation_pointer}: no operationId")),
        }

        let mut bodies = Vec::new();
        if operation.get("requestBody").is_some() {
            bodies.push(resolve(&format!("{operation_pointer}/requestBody")));
        }
        for status in object_keys(&operation["responses"]) {
            bodies.push(resolve(&format!("{operation_pointer}/responses/{}", escape_pointer(&status))));
        }
        for (body, body_pointer) in bodies {
            if !visited.insert(body_pointer.clone()) {
                continue;
            }
            for media_key in object_keys(&body["content"]) {
                let media_pointer = format!("{body_pointer}/content/{}", escape_pointer(&media_key));
                let media = &body["content"][&media_key];
                if !is_json(&media_key) || media.get("schema").is_none() {
                    continue;
                }
                // Compiling proves that every `$ref` of the schema resolves.
                let validator = openapi_validator(&format!("{media_pointer}/schema"));
                let examples = object_keys(&media["examples"])
                    .into_iter()
                    .map(|name| {
                        let value = &media["examples"][&name]["value"];
                        (format!("{media_pointer}/examples/{name}/value"), value)
                    })
                    .chain(media.get("example").map(|value| (format!("{media_pointer}/example"), value)));
                for (example_pointer, example) in examples {
                    let errors = describe_errors(validator.iter_errors(example));
                    if !errors.is_empty() {
                        problems.push(format!("{example_pointer}:\n{}", errors.join("\n")));
                    }
                }
            }
        }
    }

    assert!(problems.is_empty(), "openapi.yaml is inconsistent:\n{}", problems.join("\n"));
}

fn paths() -> &'static Map<String, Value> {
    openapi()["paths"].as_object().unwrap_or_else(|| panic!("{OPENAPI_FILE} has no `paths` object"))
}

/// Finds the one path template that `path` instantiates.
///
/// A `{param}` segment matches any one non-empty segment, so `/v1/gates/` is an unknown route,
/// as it is for the router. When two templates match, the one with a literal segment where the
/// other has a parameter wins, compared from the left. This is how routers rank routes.
fn match_template(path: &str) -> Option<&'static str> {
    let segments: Vec<&str> = path.split('/').collect();
    let mut best: Option<(Vec<bool>, &'static str)> = None;
    let mut tied: Vec<&'static str> = Vec::new();
    for template in paths().keys() {
        let template_segments: Vec<&str> = template.split('/').collect();
        if template_segments.len() != segments.len() {
            continue;
        }
        let mut literals = Vec::with_capacity(segments.len());
        let matches = template_segments.iter().zip(&segments).all(|(t, s)| {
            let is_param = t.starts_with('{') && t.ends_with('}');
            literals.push(!is_param);
            if is_param { !s.is_empty() } else { t == s }
        });
        if !matches {
            continue;
        }
        match &best {
            Some((rank, _)) if *rank > literals => {}
            Some((rank, _)) if *rank == literals => tied.push(template),
            _ => {
                tied.clear();
                best = Some((literals, template));
            }
        }
    }
    let (_, template) = best?;
    assert!(tied.is_empty(), "{path} matches several path templates equally well: {template}, {tied:?}");
    Some(template)
}

/// Checks a response that no path documents: an unknown route or a wrong method.
fn check_global_error(
    what: &str,
    status: u16,
    expected_status: u16,
    expected_code: &str,
    content_type: Option<&str>,
    body: &[u8],
) {
    let reason = if expected_status == 404 {
        "the path matches no documented path template"
    } else {
        "the method is not documented for this path"
    };
    assert_eq!(
        status,
        expected_status,
        "{what}: {reason}, so only a JSON {expected_status} `{expected_code}` is documented\nbody: {}",
        excerpt(body)
    );
    assert!(
        content_type.is_some_and(|ct| is_json(&media_type_essence(ct))),
        "{what}: an error must be JSON, got Content-Type {content_type:?}"
    );
    let instance: Value = serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{what}: the body is not JSON ({e}): {}", excerpt(body)));
    let errors = describe_errors(openapi_validator("/components/schemas/ErrorResponse").iter_errors(&instance));
    assert!(errors.is_empty(), "{what}: not an error envelope:\n{}\nbody: {}", errors.join("\n"), excerpt(body));
    assert_eq!(instance["error"]["code"], expected_code, "{what}: wrong error code");
}

/// Follows OpenAPI Reference Objects (`$ref: '#/components/responses/…'`) from the node at
/// `pointer`. Returns the target and its own pointer. Cache keys use the target's pointer, so
/// every operation that shares a response also shares its compiled validator.
fn resolve(pointer: &str) -> (&'static Value, String) {
    let mut pointer = pointer.to_owned();
    // The bound stops a cycle of references from looping forever.
    for _ in 0..16 {
        let node = openapi().pointer(&pointer).unwrap_or_else(|| panic!("{OPENAPI_FILE}: nothing at #{pointer}"));
        match node.get("$ref").and_then(Value::as_str) {
            Some(reference) => {
                pointer = reference
                    .strip_prefix('#')
                    .unwrap_or_else(|| panic!("{OPENAPI_FILE}: external $ref {reference}"))
                    .to_owned();
            }
            None => return (node, pointer),
        }
    }
    panic!("{OPENAPI_FILE}: $ref chain too long at #{pointer}")
}

/// The compiled validator for the schema at `pointer` in `openapi.yaml`.
fn openapi_validator(pointer: &str) -> Arc<Validator> {
    static CACHE: LazyLock<Mutex<HashMap<String, Arc<Validator>>>> = LazyLock::new(Mutex::default);
    // A panicking test must not poison the cache for every other test.
    let mut cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(validator) = cache.get(pointer) {
        return Arc::clone(validator);
    }
    let schema = openapi().pointer(pointer).unwrap_or_else(|| panic!("{OPENAPI_FILE}: no schema at #{pointer}"));
    // Component schemas refer to each other as `#/components/schemas/…`. That resolves against
    // the root of the schema being compiled, so the root carries a copy of `components` beside
    // the schema. JSON Schema ignores the unknown `components` keyword but resolves pointers into
    // it.
    let root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "allOf": [schema],
        "components": openapi()["components"],
    });
    let validator = jsonschema::options()
        .with_draft(Draft::Draft202012)
        // 2020-12 treats `format` as an annotation by default. The server promises RFC 3339.
        .should_validate_formats(true)
        .offline()
        .build(&root)
        .unwrap_or_else(|e| panic!("{OPENAPI_FILE}: the schema at #{pointer} does not compile: {e}"));
    let validator = Arc::new(validator);
    cache.insert(pointer.to_owned(), Arc::clone(&validator));
    validator
}

/// Every harness schema file, by file name, with the `$id` that other files refer to it by.
struct HarnessSchemas {
    ids: HashMap<String, String>,
    registry: Registry<'static>,
}

fn harness_schemas() -> &'static HarnessSchemas {
    static SCHEMAS: LazyLock<HarnessSchemas> = LazyLock::new(|| {
        let entries =
            std::fs::read_dir(HARNESS_SCHEMA_DIR).unwrap_or_else(|e| panic!("cannot list {HARNESS_SCHEMA_DIR}: {e}"));
        let mut ids = HashMap::new();
        let mut resources = Vec::new();
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if !name.ends_with(".json") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            let schema: Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
            let id = schema["$id"].as_str().unwrap_or_else(|| panic!("{} has no $id", path.display())).to_owned();
            ids.insert(name.to_owned(), id.clone());
            resources.push((id, schema));
        }
        // Registering every file under its `$id` resolves relative `$ref`s such as
        // `uuid.schema.json` offline. Nothing is fetched, and the crate is built without HTTP.
        let registry = Registry::new()
            .extend(resources)
            .and_then(|builder| builder.prepare())
            .unwrap_or_else(|e| panic!("the harness schemas do not form a registry: {e}"));
        HarnessSchemas { ids, registry }
    });
    &SCHEMAS
}

fn harness_validator(schema_file: &str) -> Arc<Validator> {
    static CACHE: LazyLock<Mutex<HashMap<String, Arc<Validator>>>> = LazyLock::new(Mutex::default);
    let mut cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(validator) = cache.get(schema_file) {
        return Arc::clone(validator);
    }
    let schemas = harness_schemas();
    let id = schemas.ids.get(schema_file).unwrap_or_else(|| {
        let mut known: Vec<&String> = schemas.ids.keys().collect();
        known.sort();
        panic!("no harness schema {schema_file} in {HARNESS_SCHEMA_DIR} (known: {known:?})")
    });
    let validator = jsonschema::options()
        .with_draft(Draft::Draft202012)
        .should_validate_formats(true)
        .with_registry(&schemas.registry)
        .offline()
        .build(&json!({ "$ref": id }))
        .unwrap_or_else(|e| panic!("the harness schema {schema_file} does not compile: {e}"));
    let validator = Arc::new(validator);
    cache.insert(schema_file.to_owned(), Arc::clone(&validator));
    validator
}

/// One line per error, with the failing `oneOf`/`anyOf` branches expanded. Without the branches,
/// a journal event that fits none of the event types says only "not valid under any schema".
fn describe_errors<'a>(errors: impl Iterator<Item = ValidationError<'a>>) -> Vec<String> {
    let mut lines = Vec::new();
    for error in errors {
        describe_error(&error, 1, &mut lines);
    }
    lines
}

fn describe_error(error: &ValidationError<'_>, depth: usize, lines: &mut Vec<String>) {
    let at = match error.instance_path().as_str() {
        "" => "(root)",
        path => path,
    };
    lines.push(format!(
        "{:indent$}- at {at}: {} [schema {}]",
        "",
        truncate(&error.to_string(), 300),
        error.evaluation_path(),
        indent = 2 * depth
    ));
    if let ValidationErrorKind::OneOfNotValid { context } | ValidationErrorKind::AnyOf { context } = error.kind() {
        for (branch, branch_errors) in context.iter().enumerate() {
            lines.push(format!("{:indent$}branch {branch}:", "", indent = 2 * depth + 2));
            for branch_error in branch_errors {
                describe_error(branch_error, depth + 2, lines);
            }
        }
    }
}

/// `application/json; charset=utf-8` → `application/json`.
fn media_type_essence(content_type: &str) -> String {
    content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase()
}

fn is_json(media_type: &str) -> bool {
    media_type == "application/json" || media_type.ends_with("+json")
}

fn is_event_stream(media_type: &str) -> bool {
    media_type.eq_ignore_ascii_case("text/event-stream")
}

/// Escapes one JSON Pointer token (RFC 6901), such as a path template or a media type.
fn escape_pointer(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

fn object_keys(value: &Value) -> Vec<String> {
    value.as_object().map(|object| object.keys().cloned().collect()).unwrap_or_default()
}

fn array(value: &Value) -> &[Value] {
    value.as_array().map(Vec::as_slice).unwrap_or_default()
}

fn excerpt(body: &[u8]) -> String {
    truncate(&String::from_utf8_lossy(body), BODY_EXCERPT)
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}

#[cfg(test)]
mod tests {
    use super::check_response;

    const SESSION: &str = "01234567-89ab-4cde-8f01-23456789abcd";
    const LOOP: &str = "bbbbbbbb-cccc-4ddd-8eee-ffffffffffff";

    #[test]
    fn an_event_stream_is_accepted_where_it_is_documented() {
        // A partial stream: only the media type is checked, never the body.
        let partial = b"retry: 3000\n\nevent: enduring\nid: 4";
        check_response(
            "GET",
            &format!("/v1/sessions/{SESSION}/events?after=3"),
            200,
            Some("text/event-stream"),
            partial,
        );
        check_response("GET", "/v1/events", 200, Some("text/event-stream; charset=utf-8"), b"");
        let inbox = format!("/v1/sessions/{SESSION}/loops/{LOOP}/commands");
        check_response("GET", &inbox, 200, Some("text/event-stream"), b"retry: 3000\n\n");
        // The same operation's JSON form is still validated.
        check_response("GET", &inbox, 200, Some("application/json"), br#"{"commands":[],"next_after":0}"#);
    }

    #[test]
    fn an_event_stream_is_refused_where_it_is_not_documented() {
        let refused = std::panic::catch_unwind(|| {
            check_response("GET", "/v1/journal", 200, Some("text/event-stream"), b"retry: 3000\n\n");
        });
        assert!(refused.is_err(), "journal pages are JSON only");
    }
}
