//! Static files: embedded in the binary and versioned for cache busting.

use crate::both_backends;
use crate::support::app::TestApp;
use axum::http::{StatusCode, header};

both_backends!(
    async fn static_files_are_embedded_and_versioned(db: TestDb) {
        let (app, _s) = TestApp::open(&db).await;
        let page = app.get("/keys").await;
        let at = page.body.find("/static/app.css?v=").unwrap();
        let url = &page.body[at..at + "/static/app.css?v=".len() + 12];
        let p = app.get(url).await;
        assert_eq!(p.status, StatusCode::OK);
        assert_eq!(p.headers[header::CONTENT_TYPE], "text/css; charset=utf-8");
        assert_eq!(
            p.headers[header::CACHE_CONTROL],
            "public, max-age=31536000, immutable"
        );
        assert!(p.body.contains(":focus-visible"));
        let p = app.get("/static/app.css?v=old").await;
        assert_eq!(p.headers[header::CACHE_CONTROL], "no-cache");
        for page in ["/", "/keys", "/backlog"] {
            let p = app.get(page).await;
            assert!(
                !p.body.contains(" style=")
                    && !p.body.contains("<style")
                    && !p.body.contains("onclick"),
                "{page}"
            );
            assert!(
                p.body.contains("<label for=\"q\">"),
                "{page}: the search box on every page"
            );
        }
    }
);
