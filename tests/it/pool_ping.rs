//! The PostgreSQL pool's liveness test: a connection in steady use goes out without a
//! ping (the caller waits for one round trip per statement, not two), one that sat
//! idle longer than `IDLE_PING_AFTER` is pinged first, and one the server closed while
//! it idled is replaced before any statement meets it (docs/PERFORMANCE.md, "A ping
//! only after idling"). The pings are counted on the wire, by a proxy between the pool
//! and the real server.

use crate::support::TestDb;
use idemwatch::store::{IDLE_PING_AFTER, Store, StoreOptions};
use sqlx::postgres::{PgConnectOptions, PgPool};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A loopback proxy to the test cluster that records, before each statement, how
/// many pings the client sent since the previous one. A ping is a Sync message on
/// its own; a statement's own messages end with one Sync (after its Execute or
/// Describe), so a ping is a Sync that follows a Sync.
///
/// sqlx also pings every connection it is given back, in the background after the
/// caller is done (not configurable): so one ping between two statements is that
/// one, and a second is the test before the connection is handed out again, which
/// the caller waits for.
struct PingCounter {
    url: String,
    gaps: Arc<Mutex<Vec<u32>>>,
}

impl PingCounter {
    async fn start(url: &str) -> PingCounter {
        let target = PgConnectOptions::from_str(url).expect("the test URL");
        let upstream = format!("{}:{}", target.get_host(), target.get_port());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let here = listener.local_addr().unwrap();
        let gaps = Arc::new(Mutex::new(Vec::new()));
        let recorded = gaps.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(&upstream).await.unwrap();
                tokio::spawn(relay(client, server, recorded.clone()));
            }
        });
        PingCounter {
            url: url.replacen(
                &format!("@{}:{}", target.get_host(), target.get_port()),
                &format!("@{here}"),
                1,
            ),
            gaps,
        }
    }

    /// The pings before each statement since the last call.
    fn take(&self) -> Vec<u32> {
        std::mem::take(&mut *self.gaps.lock().unwrap())
    }
}

/// Copies both ways; the client's bytes pass through [`ClientMessages`].
async fn relay(client: TcpStream, server: TcpStream, gaps: Arc<Mutex<Vec<u32>>>) {
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    let up = async move {
        let mut messages = ClientMessages::default();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match client_rx.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            messages.feed(&buf[..n], &gaps);
            if server_tx.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = server_tx.shutdown().await;
    };
    let down = async move {
        let _ = tokio::io::copy(&mut server_rx, &mut client_tx).await;
        let _ = client_tx.shutdown().await;
    };
    tokio::join!(up, down);
}

/// The frontend side of the protocol, enough to tell a ping from a statement: the
/// untyped start-up messages (SSL request, start-up), then typed messages.
#[derive(Default)]
struct ClientMessages {
    pending: Vec<u8>,
    started: bool,
    last: Option<u8>,
    pings: u32,
}

impl ClientMessages {
    fn feed(&mut self, bytes: &[u8], gaps: &Mutex<Vec<u32>>) {
        self.pending.extend_from_slice(bytes);
        loop {
            let typed = usize::from(self.started);
            let Some(len) = self.pending.get(typed..typed + 4) else {
                return;
            };
            let len = u32::from_be_bytes(len.try_into().unwrap()) as usize;
            if self.pending.len() < typed + len {
                return;
            }
            let message: Vec<u8> = self.pending.drain(..typed + len).collect();
            if !self.started {
                // Protocol 3.0's start-up message; before it, an SSL or GSS request.
                self.started = message[4..8] == 196_608u32.to_be_bytes();
                continue;
            }
            let kind = message[0];
            match (self.last, kind) {
                (Some(b'S'), b'S') => self.pings += 1,
                // The next statement starts after the last one's Sync.
                (Some(b'S'), _) => gaps.lock().unwrap().push(std::mem::take(&mut self.pings)),
                _ => {}
            }
            self.last = Some(kind);
        }
    }
}

/// Runs `n` statements, each with how long the connection can have idled before it:
/// at most the time since the previous statement returned (`last_done`).
async fn statements(pool: &PgPool, n: usize, last_done: &mut Instant) -> Vec<Duration> {
    let mut idled = Vec::new();
    for _ in 0..n {
        idled.push(last_done.elapsed());
        sqlx::query("SELECT 1").execute(pool).await.unwrap();
        *last_done = Instant::now();
    }
    idled
}

async fn pool_of_one(url: &str) -> Store {
    let options = StoreOptions {
        max_connections: 1,
        ..StoreOptions::default()
    };
    Store::connect(url, &options).await.expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_connection_in_steady_use_goes_out_unpinged_and_an_idle_one_is_pinged() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let proxy = PingCounter::start(&db.url).await;
    let Store::Postgres(pool) = pool_of_one(&proxy.url).await else {
        unreachable!("a postgres:// URL")
    };
    let mut last_done = Instant::now();
    statements(&pool, 1, &mut last_done).await;
    proxy.take();

    let idled = statements(&pool, 20, &mut last_done).await;
    let pings = proxy.take();
    assert_eq!(pings.len(), 20, "one gap before each statement: {pings:?}");
    // A statement that came within the window: only sqlx's ping on release before it.
    // (A stall of the test longer than the window, on a loaded machine, lets the pool
    // test that one, rightly; the rest still say it.)
    let prompt: Vec<u32> = (0..20)
        .filter(|&i| idled[i] < IDLE_PING_AFTER)
        .map(|i| pings[i])
        .collect();
    assert!(
        prompt.len() >= 10,
        "the machine stalled too often: {idled:?}"
    );
    assert_eq!(
        prompt,
        vec![1; prompt.len()],
        "statements in a row on one connection: sqlx's ping on release between them, and \
         no test before each (that doubled the round trips a caller waits for)"
    );

    tokio::time::sleep(2 * IDLE_PING_AFTER).await;
    let idled = statements(&pool, 2, &mut last_done).await;
    let pings = proxy.take();
    assert_eq!(
        pings[0], 2,
        "a connection idle for longer than {IDLE_PING_AFTER:?} is tested before it is used"
    );
    if idled[1] < IDLE_PING_AFTER {
        assert_eq!(
            pings[1], 1,
            "and the next statement goes out without a test again"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_connection_the_server_closed_while_it_idled_is_replaced_before_use() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let Store::Postgres(pool) = pool_of_one(&db.url).await else {
        unreachable!("a postgres:// URL")
    };
    let Store::Postgres(admin) = &db.store else {
        unreachable!("a postgres:// URL")
    };
    let backend = || sqlx::query_scalar::<_, i32>("SELECT pg_backend_pid()").fetch_one(&pool);
    let before = backend().await.unwrap();
    // As an idle-session timeout, a restarted server or a firewall would: the server's
    // end goes away while the pool holds the connection. Waits until it has exited.
    let gone: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)")
        .bind(before)
        .fetch_one(admin)
        .await
        .unwrap();
    assert!(gone, "the backend {before} did not exit");

    tokio::time::sleep(2 * IDLE_PING_AFTER).await;
    let after = backend()
        .await
        .expect("the pool tests an idle connection and replaces a closed one");
    assert_ne!(after, before, "a new connection, not the closed one");
}
