//! Support's journey in a real browser (issue 50): headless Chromium driven by
//! chromedriver types whatever id a customer or an agent gave into the search box of a
//! real `idemwatch serve` (seeded SQLite, the demo's tools file with its money field),
//! and reads the pages as support staff do: the key found, its amount as money, the
//! timeline in plain words with the engineering detail one click away, the Keys page
//! opening on the search box. `IDEMWATCH_UPDATE_SCREENSHOTS=1` copies its screenshots to
//! docs/screenshots/.
//!
//! Without Chromium or chromedriver the test fails under `CI=true` and skips loudly
//! elsewhere.

use crate::support::TestDb;
use crate::support::as_key;
use crate::support::server::Server;
use crate::support::webdriver::{Driver, browser_or_skip, publish_screenshots};
use crate::ui_seed::seed;
use chrono::Utc;
use std::path::Path;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn support_finds_a_refund_by_any_id_in_a_real_browser() {
    let Some((chromium, chromedriver)) = browser_or_skip() else {
        return;
    };
    let db = TestDb::sqlite().await;
    let s = seed(&db.store, Utc::now(), 0).await;
    // The provider's refund id, as the seed's provider stored it in the result.
    let record = db
        .store
        .record(&as_key(&s.second_refund))
        .await
        .unwrap()
        .unwrap();
    let refund_id = record.result.unwrap()["refund_id"]
        .as_str()
        .unwrap()
        .to_string();
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tools.toml");
    let server = Server::start("serve", &db.url, &["--tools-file", tools.to_str().unwrap()]).await;
    let base = format!("http://{}", server.addr);
    let profile = tempfile::tempdir().unwrap();
    let shots = tempfile::tempdir().unwrap();
    let shots_dir = shots.path().to_path_buf();
    let (mismatch, second_refund) = (s.mismatch.clone(), s.second_refund.clone());
    tokio::task::spawn_blocking(move || {
        let d = Driver::start(&chromedriver, &chromium, profile.path());
        let search = |q: &str| {
            d.goto(&format!("{base}/"));
            d.type_into("#q", q);
            d.click("form.search button[type=submit]");
        };

        // The order in lower case: one key, opened directly, its amount as money.
        search("a-1001");
        let page = d.wait_for("Changed retry refused");
        assert!(
            d.url().ends_with(&format!("/keys/{mismatch}")),
            "{}",
            d.url()
        );
        assert!(page.contains("<strong class=\"amount\">£45.00</strong>"));
        assert!(page.contains("<td><code>£45.00</code></td><td><code>£40.00</code></td>"));
        // Plain words; the engineer's terms folded until asked for.
        assert!(page.contains("it was refused and nothing was sent."));
        assert!(page.contains("<details class=\"engineering\">"));
        d.click("li[data-kind=payload_mismatch] details.engineering summary");
        let page = d.wait_for("<details class=\"engineering\" open=\"\">");
        assert!(page.contains("refused (422)"));
        d.screenshot(&shots_dir.join("support-key-found.png"));

        // The provider's id from the result, in capitals; the ticket from the intent.
        search(&refund_id.to_uppercase());
        d.wait_for("data-kind=\"completed\"");
        assert!(
            d.url().ends_with(&format!("/keys/{second_refund}")),
            "{}",
            d.url()
        );
        search("ticket-5521");
        d.wait_for("data-kind=\"completed\"");
        assert!(
            d.url().ends_with(&format!("/keys/{second_refund}")),
            "{}",
            d.url()
        );

        // The number alone: both refunds on the order, listed.
        search("88214");
        let page = d.wait_for("2 keys, newest activity first");
        assert!(page.contains(&second_refund));
        assert!(
            page.contains("<details class=\"filters advanced\">"),
            "folded filters"
        );
        d.screenshot(&shots_dir.join("support-search.png"));
    })
    .await
    .unwrap();
    drop(server);

    publish_screenshots(
        shots.path(),
        ["support-key-found.png", "support-search.png"],
    );
}
