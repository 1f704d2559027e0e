//! The OpenAPI document, the route that serves it and the router agree: the served
//! document is the committed docs/openapi.json, and every `/api/v1` route in the
//! source is in the document with its methods, and nothing else is.

use crate::support::TestDb;
use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use idemwatch::web::{self, AppState};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use tower::ServiceExt;

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// `(method, path)` of every `.route("/api/v1…", …)` call under src/web.
fn routes_in_source() -> BTreeSet<(String, String)> {
    let mut files = vec![];
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src/web")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut routes = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (at, _) in text.match_indices(".route(") {
            let rest = text[at + ".route(".len()..].trim_start();
            let Some(literal) = rest.strip_prefix('"') else {
                continue;
            };
            let path = &literal[..literal.find('"').unwrap()];
            if !path.starts_with("/api/v1") {
                continue;
            }
            // The handler expression: up to the parenthesis that closes `.route(`.
            let mut depth = 1;
            let mut end = 0;
            for (i, c) in rest.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    end = i;
                    break;
                }
            }
            let handler = &rest[..end];
            for m in METHODS {
                let called = handler.match_indices(&format!("{m}(")).any(|(i, _)| {
                    i == 0
                        || !handler.as_bytes()[i - 1].is_ascii_alphanumeric()
                            && handler.as_bytes()[i - 1] != b'_'
                });
                if called {
                    routes.insert((m.to_string(), path.to_string()));
                }
            }
        }
    }
    routes
}

fn committed() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/openapi.json"))
        .unwrap()
}

#[tokio::test]
async fn the_served_document_is_the_committed_one_and_matches_the_router() {
    let db = TestDb::sqlite().await;
    let response = web::app(AppState::new(db.store.clone()))
        .oneshot(
            Request::get("/api/v1/openapi.json")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let served = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(String::from_utf8_lossy(&served), committed());

    let doc: Value = serde_json::from_str(&committed()).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            assert!(METHODS.contains(&method.as_str()), "{path}: {method}");
            documented.insert((method.clone(), path.clone()));
        }
    }
    let routed = routes_in_source();
    assert!(routed.len() >= 7, "the scan found the routes: {routed:?}");
    assert_eq!(
        routed.difference(&documented).collect::<Vec<_>>(),
        Vec::<&(String, String)>::new(),
        "routes missing from docs/openapi.json"
    );
    assert_eq!(
        documented.difference(&routed).collect::<Vec<_>>(),
        Vec::<&(String, String)>::new(),
        "documented paths the router does not have"
    );
    // Every $ref resolves.
    let text = committed();
    let marker = "\"$ref\": \"#/components/schemas/";
    for (at, _) in text.match_indices(marker) {
        let name = &text[at + marker.len()..];
        let name = &name[..name.find('"').unwrap()];
        assert!(doc["components"]["schemas"].get(name).is_some(), "{name}");
    }
}

/// The first quoted string after `marker` in the file at `path` (under the repository).
fn quoted_after(path: &str, marker: &str) -> String {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("{path}: no {marker:?}"));
    let rest = &text[at + marker.len()..];
    let start = rest.find('"').unwrap() + 1;
    let end = start + rest[start..].find('"').unwrap();
    rest[start..end].to_string()
}

/// The server, the OpenAPI document and both clients carry one version: a release moves
/// them together (scripts/release builds all of them).
#[test]
fn the_server_the_openapi_document_and_the_clients_share_one_version() {
    let server = env!("CARGO_PKG_VERSION");
    let doc: Value = serde_json::from_str(&committed()).unwrap();
    let found = [
        (
            "docs/openapi.json info.version",
            doc["info"]["version"].as_str().unwrap().to_string(),
        ),
        (
            "clients/python/pyproject.toml",
            quoted_after("clients/python/pyproject.toml", "\nversion ="),
        ),
        (
            "clients/python/src/idemwatch/__init__.py",
            quoted_after("clients/python/src/idemwatch/__init__.py", "__version__ ="),
        ),
        (
            "clients/typescript/package.json",
            quoted_after("clients/typescript/package.json", "\"version\":"),
        ),
        (
            "clients/typescript/src/client.js",
            quoted_after("clients/typescript/src/client.js", "export const VERSION ="),
        ),
    ];
    for (what, version) in found {
        assert_eq!(
            version, server,
            "{what} says {version}, Cargo.toml says {server}"
        );
    }
}

/// Every status the guard routes can answer before or around their handler is in the
/// document (issue 47): a body past --guard-max-body-bytes (413) or not whole within
/// --request-body-timeout (408), a caller past its bounds (429) and every slow-body slot
/// taken or the database down (503), the last two with `Retry-After`.
#[test]
fn the_guard_routes_document_every_bound_they_answer() {
    let doc: Value = serde_json::from_str(&committed()).unwrap();
    let with_body = ["408", "413", "429", "503"];
    let without = ["429", "503"];
    let routes = [
        ("post", "/api/v1/guard/admit", &with_body[..]),
        ("post", "/api/v1/guard/settle", &with_body[..]),
        ("post", "/api/v1/guard/reconcile", &with_body[..]),
        ("get", "/api/v1/guard/keys", &without[..]),
        ("get", "/api/v1/guard/keys/{key}", &without[..]),
    ];
    for (method, path, statuses) in routes {
        let responses = &doc["paths"][path][method]["responses"];
        for status in statuses {
            let r = &responses[*status];
            assert!(r.is_object(), "{method} {path}: no {status}");
            assert!(
                r["content"]["application/problem+json"].is_object(),
                "{method} {path} {status}: a problem"
            );
            if ["429", "503"].contains(status) {
                assert!(
                    r["headers"]["Retry-After"].is_object(),
                    "{method} {path} {status}: Retry-After"
                );
            }
        }
    }
}
