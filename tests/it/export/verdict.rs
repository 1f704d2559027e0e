//! Issue 50, the auditor on a key's page: the verdict of a key a person decided
//! follows the resolution (who, why, on what evidence), not the provider's story, and
//! a field given as nothing is not printed as `null` in the timeline.

use super::*;
use crate::both_backends;
use crate::support::as_key;
use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode};
use idemwatch::web::{AppState, app};
use tower::ServiceExt;

async fn page(store: &Store, key: &str) -> String {
    let response = app(AppState::new(store.clone()))
        .oneshot(
            Request::get(format!("/keys/{key}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = to_bytes(response.into_body(), usize::MAX).await.unwrap();
    String::from_utf8(body.to_vec()).unwrap()
}

/// The text of the page's verdict paragraph.
fn verdict(html: &str) -> &str {
    let start = html.find("<p class=\"verdict\">").expect("a verdict") + 19;
    let len = html[start..].find("</p>").unwrap();
    &html[start..start + len]
}

both_backends!(
    async fn a_key_a_person_marked_failed_says_who_decided_why_and_on_what_evidence(db: TestDb) {
        let f = Fixture::new(&db);
        let s = seed(&f, Utc::now() - TimeDelta::days(10)).await;
        let request = ResolveRequest {
            resolution: Resolution::Failed,
            reason: "the provider shows no refund and the customer withdrew".into(),
            evidence: None,
            result: None,
            actor: "ana".into(),
            expected_token: None,
        };
        f.guard
            .resolve(&as_key(&s.unknown), &request)
            .await
            .unwrap();

        let html = page(&f.store, &s.unknown).await;
        let said = verdict(&html);
        assert!(said.starts_with("Failed: marked failed by ana ("), "{said}");
        assert!(
            said.contains("the provider shows no refund and the customer withdrew"),
            "{said}"
        );
        assert!(said.contains("No evidence was recorded."), "{said}");
        assert!(!said.contains("refused definitively"), "{said}");
        assert!(
            !html.contains("<dt>evidence</dt><dd>null</dd>"),
            "the timeline prints no `evidence null`"
        );

        // With evidence, the verdict names it; a key the provider refused keeps its story.
        let html = page(&f.store, &s.nasty).await;
        let said = verdict(&html);
        assert!(said.starts_with("Done: marked done by "), "{said}");
        assert!(
            said.contains("Evidence: rf_1, &#34;seen&#34; in the dashboard."),
            "{said}"
        );
        let html = page(&f.store, &s.failed).await;
        assert!(
            verdict(&html).starts_with("Failed: the provider refused definitively"),
            "{html}"
        );
    }
);
