//! A minimal keep-alive HTTP/1.1 client (hyper's connection API) and a pool of
//! connections, one per concurrent client.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

pub struct Client {
    sender: SendRequest<Full<Bytes>>,
    /// `Authorization: Bearer …` on every request, when set.
    bearer: Option<hyper::header::HeaderValue>,
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> Client {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (sender, conn) = http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(conn);
        Client {
            sender,
            bearer: None,
        }
    }

    /// The same connection sending `token` as a bearer token.
    pub fn bearer(mut self, token: &str) -> Client {
        self.bearer = Some(format!("Bearer {token}").parse().unwrap());
        self
    }

    /// A request to `path` as this client sends it.
    fn request(&self, method: hyper::Method, path: &str) -> hyper::http::request::Builder {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, "127.0.0.1");
        if let Some(b) = &self.bearer {
            req = req.header(hyper::header::AUTHORIZATION, b);
        }
        req
    }

    /// GET `path`; the status and the body length (the body is read in full).
    pub async fn get(&mut self, path: &str) -> (u16, usize) {
        self.sender.ready().await.unwrap();
        let req = self
            .request(hyper::Method::GET, path)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = self.sender.send_request(req).await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, body.len())
    }

    /// POST a JSON `body` to `path`; the status and the body.
    pub async fn post_json(&mut self, path: &str, body: Vec<u8>) -> (u16, Bytes) {
        self.sender.ready().await.unwrap();
        let req = self
            .request(hyper::Method::POST, path)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let resp = self.sender.send_request(req).await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.into_body().collect().await.unwrap().to_bytes())
    }

    /// GET `path`'s body as text.
    pub async fn get_text(&mut self, path: &str) -> String {
        self.sender.ready().await.unwrap();
        let req = self
            .request(hyper::Method::GET, path)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = self.sender.send_request(req).await.unwrap();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8_lossy(&body).into_owned()
    }
}

/// Connections shared by the workers of a measurement: each call takes one and gives
/// it back, so `n` workers on `n` connections never wait for each other.
#[derive(Clone)]
pub struct Pool(Arc<Mutex<Vec<Client>>>);

impl Pool {
    pub async fn new(addr: SocketAddr, n: usize) -> Pool {
        let mut clients = Vec::new();
        for _ in 0..n {
            clients.push(Client::connect(addr).await);
        }
        Pool(Arc::new(Mutex::new(clients)))
    }

    /// GET `path`, asserting `expect`; the body length.
    pub async fn get(&self, path: &str, expect: u16) -> usize {
        let mut c = self
            .0
            .lock()
            .unwrap()
            .pop()
            .expect("one connection per worker");
        let (status, len) = c.get(path).await;
        self.0.lock().unwrap().push(c);
        assert_eq!(status, expect, "GET {path}");
        len
    }
}

impl Pool {
    /// One connection for a sequence of calls (admit then settle), given back after.
    pub fn take(&self) -> Client {
        self.0
            .lock()
            .unwrap()
            .pop()
            .expect("one connection per worker")
    }

    pub fn give_back(&self, c: Client) {
        self.0.lock().unwrap().push(c);
    }
}

/// Serves `app` on a free loopback port in this process.
pub async fn serve(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // As `serve` does (web/server.rs): small responses leave at once, not after the
    // client's delayed ACK.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}
