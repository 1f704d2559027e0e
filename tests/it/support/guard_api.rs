//! The guard over HTTP through `web::app` (no socket): a [`GuardApi`] with typed
//! helpers for each step, on the fault suite's fixture (manual clock, fake provider).

use crate::support::TestDb;
use crate::support::fixture::{DEADLINE, Fixture};
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use chrono::TimeDelta;
use http_body_util::BodyExt;
use idemwatch::auth::Authenticator;
use idemwatch::guard::{
    GuardSettings, IdempotencyKey, Operation, ToolCall, ToolPolicies, ToolPolicy,
};
use idemwatch::web::{self, AppState};
use serde_json::{Value, json};
use std::sync::Arc;
use tower::ServiceExt;

/// The tools file of these tests: `issue_refund` with the fake provider's retention
/// (24 h), the fixture's call timeout and `reason` as free text: the same policy the
/// Rust tests' `Client` declares, so HTTP and Rust workers share keys.
pub fn tools() -> ToolPolicies {
    let mut tools = ToolPolicies::default();
    tools.tools.insert(
        "issue_refund".into(),
        ToolPolicy {
            key_retention: TimeDelta::hours(24),
            call_timeout: DEADLINE,
            free_text_fields: vec!["reason".into()],
            natural_key: vec![],
            duplicate_window: idemwatch::guard::DEFAULT_DUPLICATE_WINDOW,
        },
    );
    tools
}

pub struct GuardApi {
    pub http: Http,
    pub state: AppState,
    pub f: Fixture,
}

/// Requests to the app, as one caller (cheap to clone into a task).
#[derive(Clone)]
pub struct Http {
    pub app: Router,
    /// `Authorization: Bearer …` for every request, if set.
    pub bearer: Option<String>,
}

#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub json: Value,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The fencing token and key of an execute or reconcile decision.
    pub fn token(&self) -> i64 {
        self.json["fencing_token"]
            .as_i64()
            .expect("a fencing token")
    }

    pub fn key(&self) -> IdempotencyKey {
        IdempotencyKey::parse(self.json["key"].as_str().expect("a key")).unwrap()
    }
}

impl GuardApi {
    /// No auth file: the caller is the local admin.
    pub fn new(db: &TestDb) -> Self {
        Self::with_auth(db, None)
    }

    pub fn with_auth(db: &TestDb, auth: Option<Authenticator>) -> Self {
        Self::with_tools(db, auth, tools())
    }

    /// The app with its own tools file (a natural key, a duplicate window…).
    pub fn with_tools(db: &TestDb, auth: Option<Authenticator>, tools: ToolPolicies) -> Self {
        let f = Fixture::new(db);
        let settings = GuardSettings {
            lease_margin: TimeDelta::seconds(30),
        };
        let mut state = AppState::new(db.store.clone())
            .with_clock(Arc::new(f.clock.clone()))
            .with_guard(tools, settings);
        if let Some(auth) = auth {
            state = state.with_auth(auth, false);
        }
        Self {
            http: Http {
                app: web::app(state.clone()),
                bearer: None,
            },
            state,
            f,
        }
    }

    /// The same app, called with `Authorization: Bearer <token>`.
    pub fn as_token(&self, token: &str) -> Http {
        Http {
            app: self.http.app.clone(),
            bearer: Some(token.to_string()),
        }
    }

    /// A worker admits `call` (token 1) and reports the outcome unknown with `reason`
    /// (a timeout, a 503, a crash): the key, now UNKNOWN.
    pub async fn admit_then_unknown(&self, call: &ToolCall, reason: &str) -> IdempotencyKey {
        let key = self.admit(call).await.key();
        let s = self
            .settle(&key, 1, json!({"outcome": "unknown", "reason": reason}))
            .await;
        assert_eq!(s.json["status"], "UNKNOWN", "{:?}", s.json);
        key
    }

    /// The test worker calls the provider for `key` with `args`: the provider's result.
    pub async fn execute(&self, key: &IdempotencyKey, args: &Value) -> Value {
        self.f.client([]).execute(key, args).await.unwrap()
    }

    /// The test worker looks `key` up at the provider, which has it.
    pub async fn found(&self, key: &IdempotencyKey) -> Value {
        self.f.client([]).find_by_key(key).await.unwrap().unwrap()
    }
}

/// The guard calls ([`Http`]) as the local admin: `api.admit(…)`, `api.settle(…)`.
impl std::ops::Deref for GuardApi {
    type Target = Http;

    fn deref(&self) -> &Http {
        &self.http
    }
}

impl Http {
    /// A raw request: `content_type` None sends none.
    pub async fn raw(
        &self,
        method: Method,
        uri: &str,
        content_type: Option<&str>,
        body: &str,
    ) -> Reply {
        let mut b = Request::builder().method(method).uri(uri);
        if let Some(ct) = content_type {
            b = b.header("content-type", ct);
        }
        if let Some(t) = &self.bearer {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        let response = self
            .app
            .clone()
            .oneshot(b.body(Body::from(body.to_string())).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let json = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| json!({ "not_json": String::from_utf8_lossy(&bytes).to_string() }));
        Reply {
            status,
            headers,
            json,
        }
    }

    pub async fn post(&self, path: &str, body: Value) -> Reply {
        self.raw(
            Method::POST,
            &format!("/api/v1/guard/{path}"),
            Some("application/json"),
            &body.to_string(),
        )
        .await
    }

    pub async fn admit(&self, call: &ToolCall) -> Reply {
        self.post(
            "admit",
            json!({
                "intent": call.intent,
                "business_ref": call.business_ref,
                "args": call.args,
                "worker": call.actor,
            }),
        )
        .await
    }

    pub async fn settle(&self, key: &IdempotencyKey, token: i64, outcome: Value) -> Reply {
        self.fenced("settle", key, token, outcome).await
    }

    pub async fn reconcile(&self, key: &IdempotencyKey, token: i64, lookup: Value) -> Reply {
        self.fenced("reconcile", key, token, lookup).await
    }

    /// A step under a fencing token: `extra` joins key, token and worker.
    async fn fenced(&self, path: &str, key: &IdempotencyKey, token: i64, extra: Value) -> Reply {
        let mut body = json!({"key": key, "fencing_token": token, "worker": "worker-1"});
        let o = body.as_object_mut().unwrap();
        for (k, v) in extra.as_object().unwrap() {
            o.insert(k.clone(), v.clone());
        }
        self.post(path, body).await
    }

    pub async fn key_state(&self, key: &IdempotencyKey, query: &str) -> Reply {
        self.raw(
            Method::GET,
            &format!("/api/v1/guard/keys/{key}{query}"),
            None,
            "",
        )
        .await
    }
}
