//! `idemwatch demo`: the service as `serve` runs it, on a throwaway database, with
//! synthetic traffic through the real guard next to it.

use super::serve::{bind, open_store, run_server, shutdown_signal};
use super::{
    AuthArgs, DatabaseArgs, GuardArgs, MetricsArgs, RetentionArgs, ServeArgs, parse_duration,
    redact_url,
};
use crate::demo::{
    CLIENT_DEADLINE, Demo, DemoConfig, IncidentSchedule, LatencyModel, PROVIDER_RETENTION,
    PROVIDER_TIMEOUT, clock,
};
use crate::guard::ToolPolicies;
use anyhow::Context;
use clap::Args;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::watch;

#[derive(Clone, Args)]
pub struct DemoArgs {
    #[command(flatten)]
    pub timeouts: super::TimeoutArgs,
    /// Address to listen on. Loopback by default; any other address needs `--auth-file`.
    #[arg(long, env = "IDEMWATCH_DEMO_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Database for the demo's keys: `sqlite://FILE` or `postgres://…`. Default: a new
    /// SQLite file in a temporary directory, removed on exit. Deliberately not read
    /// from DATABASE_URL, so that a demo never writes into a real database by accident.
    #[arg(long, env = "IDEMWATCH_DEMO_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// New tool calls per second; transport retries and redeliveries come on top.
    #[arg(long, env = "IDEMWATCH_DEMO_RATE", default_value_t = 10.0, value_parser = parse_rate)]
    pub rate: f64,
    /// Run this long, then stop as on Ctrl-C (e.g. `30s`, `5m`). Default: until Ctrl-C.
    #[arg(long, env = "IDEMWATCH_DEMO_DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Start with the incident: the provider's p99 above the client deadline.
    #[arg(long, env = "IDEMWATCH_DEMO_INCIDENT")]
    pub incident: bool,
    /// Schedule an incident this often, the first 2 minutes in (`off` for none).
    #[arg(long, env = "IDEMWATCH_DEMO_INCIDENT_EVERY", default_value = "1h", value_parser = parse_every)]
    pub incident_every: Every,
    /// How long each incident lasts. 5 minutes lets IdempotencyReplaySpike fire.
    #[arg(long, env = "IDEMWATCH_DEMO_INCIDENT_LENGTH", default_value = "5m", value_parser = parse_duration)]
    pub incident_length: Duration,
    /// How much faster than the clock the simulation runs: at 10, the 10 s client
    /// deadline is 1 s. Database times stay real.
    #[arg(long, env = "IDEMWATCH_DEMO_SPEED", default_value_t = 10.0, value_parser = parse_speed)]
    pub speed: f64,
    /// The same retention settings as `serve` (the pruner runs in the demo too).
    #[command(flatten)]
    pub retention: RetentionArgs,
    /// The same tailer and exporter settings as `serve`.
    #[command(flatten)]
    pub metrics: MetricsArgs,
    /// The same authentication settings as `serve`.
    #[command(flatten)]
    pub auth: AuthArgs,
    /// The same guard settings as `serve`; without `--tools-file`, the demo uses
    /// examples/tools.toml (built in).
    #[command(flatten)]
    pub guard: GuardArgs,
}

/// The demo's tools file when none is given.
const DEMO_TOOLS: &str = include_str!("../../examples/tools.toml");

/// The URL may carry a password: never print it.
impl std::fmt::Debug for DemoArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DemoArgs")
            .field("listen", &self.listen)
            .field(
                "database_url",
                &self.database_url.as_deref().map(redact_url),
            )
            .field("rate", &self.rate)
            .field("duration", &self.duration)
            .field("incident", &self.incident)
            .field("incident_every", &self.incident_every)
            .field("incident_length", &self.incident_length)
            .field("speed", &self.speed)
            .field("retention", &self.retention)
            .field("metrics", &self.metrics)
            .field("auth", &self.auth)
            .field("guard", &self.guard)
            .finish()
    }
}

/// `--incident-every`: a period, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Every(pub Option<Duration>);

/// When the first scheduled incident starts: late enough that the normal baseline
/// shows first, early enough for a first look.
const FIRST_INCIDENT: Duration = Duration::from_secs(120);

/// Checkpoints a few times a minute: an export taken a moment after a change is
/// already covered (docs/DEMO.md).
const DEMO_CHECKPOINT_INTERVAL: &str = "15s";

pub async fn demo_command(args: DemoArgs) -> anyhow::Result<()> {
    let retention = args.retention.checked().await?;
    let (url, temp_dir) = demo_database(args.database_url.as_deref())?;
    // The demo signs as a production server does, with a key made for this run (gone
    // with it), so the evidence path can be tried: the public key URL, checkpoints,
    // signed exports that `idemwatch verify --require-signed` accepts.
    let evidence = tempfile::tempdir().context("cannot make the demo's key directory")?;
    let serve = serve_args(&args, url.clone(), evidence.path())?;
    // The same refusal as `serve`: a public address needs authentication.
    let auth = args.auth.authenticator(args.listen)?;
    let mut config = demo_config(&args);
    let tools = demo_tools(&args, &config)?;
    let store = open_store(&serve.database).await?;
    let listener = bind(args.listen).await?;
    let base = format!("http://{}", listener.local_addr()?);
    if args.auth.auth_file.is_none() {
        // A quarter of the plain traffic goes through this server's guard API, as a
        // local harness would call it (no auth file: no token, no CSRF).
        let mut addr = listener.local_addr()?;
        if addr.ip().is_unspecified() {
            addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        config.guard_api = Some(addr);
    }
    let demo = Demo::new(store.clone(), config);
    print_banner(&base, &url, temp_dir.is_some(), &args);

    let (stop, halt) = stop_signal(args.duration);
    let tty = std::io::stdout().is_terminal();
    // The server stops after the traffic has drained: a quarter of the calls settle
    // through its guard API, so closing the listener first failed their settles.
    let (drained, mut is_drained) = watch::channel(false);
    let server_stop = {
        let stop = stop.clone();
        async move {
            stop.await;
            let _ = is_drained.wait_for(|d| *d).await;
        }
    };
    let traffic = async {
        demo.run(stop.clone()).await;
        drained.send_replace(true);
    };
    let server = async {
        let routes = super::serve::Extra {
            routes: crate::demo::router(demo.clone()),
            provider_lookup: Some(crate::demo::PROVIDER_LOOKUP),
        };
        let served = run_server(
            &serve,
            retention,
            auth,
            tools,
            store.clone(),
            listener,
            routes,
            server_stop,
        )
        .await;
        halt.send_replace(true);
        served
    };
    let status = print_status(&demo, stop.clone(), tty);
    let (served, (), ()) = tokio::join!(server, traffic, status);
    let summary = demo.snapshot().await;
    store.close().await;
    drop(evidence);
    if let Some(dir) = temp_dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    served?;
    report(summary.ok().as_ref(), &demo)
}

/// What `serve` would have been given: the demo runs the same service, signing with a
/// key made in `evidence` for this run.
fn serve_args(args: &DemoArgs, url: String, evidence: &Path) -> anyhow::Result<ServeArgs> {
    let signing_key = evidence.join("signing.pem");
    super::checkpoint::write_new_signing_key(&signing_key)?;
    Ok(ServeArgs {
        database: DatabaseArgs {
            database_url: url,
            db_max_connections: 16,
            no_migrate: false,
        },
        listen: args.listen,
        retention: args.retention.clone(),
        metrics: args.metrics.clone(),
        auth: args.auth.clone(),
        guard: args.guard.clone(),
        checkpoints: super::CheckpointArgs {
            signing_key: Some(signing_key),
            checkpoint_dir: Some(evidence.join("checkpoints")),
            checkpoint_interval: DEMO_CHECKPOINT_INTERVAL
                .parse()
                .map_err(|e: String| anyhow::anyhow!(e))?,
        },
        timeouts: args.timeouts.clone(),
    })
}

/// The traffic's settings from the flags.
fn demo_config(args: &DemoArgs) -> DemoConfig {
    let mut config = DemoConfig::new(args.rate, args.speed);
    config.incident = IncidentSchedule {
        start_now: args.incident,
        // After `--incident`, the schedule resumes one period later.
        first_at: match (args.incident, args.incident_every.0) {
            (true, Some(every)) => every,
            _ => FIRST_INCIDENT,
        },
        every: args.incident_every.0,
        length: args.incident_length,
    };
    config
}

/// The tools file given, or the built-in one fitted to the simulated provider.
fn demo_tools(args: &DemoArgs, config: &DemoConfig) -> anyhow::Result<ToolPolicies> {
    if args.guard.tools_file.is_some() {
        return args.guard.tools();
    }
    let mut tools =
        ToolPolicies::parse(DEMO_TOOLS).map_err(|e| anyhow::anyhow!("examples/tools.toml: {e}"))?;
    // The built-in tools file is written for real providers (keys kept for hours); the
    // simulated one forgets after `provider_retention`, and the guard must know.
    let retention =
        chrono::TimeDelta::from_std(config.provider_retention).unwrap_or(chrono::TimeDelta::MAX);
    for policy in tools.tools.values_mut().chain(tools.default.iter_mut()) {
        // A provider that does not deduplicate keeps no key at all.
        if policy.provider_dedupes() {
            policy.key_retention = retention;
        }
        // The duplicate window is the story's 24 h too (src/demo/provider.rs).
        policy.duplicate_window = retention;
    }
    Ok(tools)
}

/// When the demo stops: Ctrl-C, SIGTERM, `--duration`, or the sender turning true (the
/// service failing).
fn stop_signal(
    duration: Option<Duration>,
) -> (Shared<BoxFuture<'static, ()>>, watch::Sender<bool>) {
    let (halt, mut halted) = watch::channel(false);
    let stop = async move {
        let timer = async {
            match duration {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shutdown_signal() => {},
            () = timer => {},
            _ = halted.wait_for(|h| *h) => {},
        }
    }
    .boxed()
    .shared();
    (stop, halt)
}

/// The run's figures; an error if the provider ever performed an effect twice.
fn report(summary: Option<&crate::demo::DemoStats>, demo: &Demo) -> anyhow::Result<()> {
    let provider = demo.provider();
    if let Some(s) = summary {
        let ratio = s
            .replay_ratio
            .map_or("-".into(), |r| format!("{:.2}%", r * 100.0));
        println!(
            "requests: {}, replays: {} ({ratio}), UNKNOWN backlog: {}",
            s.requests, s.replays, s.unknown_backlog
        );
    }
    println!(
        "effects: {}, duplicates: {}",
        provider.effect_count(),
        provider.duplicates()
    );
    if provider.duplicates() > 0 {
        anyhow::bail!("the provider performed an effect twice: the guard failed");
    }
    Ok(())
}

/// The database URL, and the temporary directory to remove afterwards, if any. A
/// given SQLite file is created when missing.
fn demo_database(given: Option<&str>) -> anyhow::Result<(String, Option<PathBuf>)> {
    if let Some(url) = given {
        if url.starts_with("sqlite:") && !url.contains("mode=") {
            let sep = if url.contains('?') { '&' } else { '?' };
            return Ok((format!("{url}{sep}mode=rwc"), None));
        }
        return Ok((url.to_string(), None));
    }
    let dir = std::env::temp_dir().join(format!(
        "idemwatch-demo-{}-{}",
        std::process::id(),
        chrono::Utc::now().timestamp()
    ));
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create a temporary directory {}", dir.display()))?;
    let url = format!("sqlite://{}?mode=rwc", dir.join("idemwatch.db").display());
    Ok((url, Some(dir)))
}

fn print_banner(base: &str, url: &str, temporary: bool, args: &DemoArgs) {
    let speed = args.speed;
    let deadline = CLIENT_DEADLINE.div_f64(speed);
    let retention = PROVIDER_RETENTION.div_f64(speed);
    let normal = LatencyModel::NORMAL;
    let incident = LatencyModel::INCIDENT;
    let db_note = if temporary {
        " (temporary, removed on exit)"
    } else {
        ""
    };
    println!(
        "idemwatch demo: refunds through the real guard against a simulated payments provider"
    );
    println!("  UI           {base}/");
    println!("  metrics      {base}/metrics");
    println!("  demo stats   {base}/demo/stats");
    println!(
        "  evidence     {base}/api/v1/checkpoints/public-key (checkpoints signed every {DEMO_CHECKPOINT_INTERVAL} with a key made for this run)"
    );
    println!(
        "  provider     {base}/demo/provider/KEY (its dashboard: the refunds tagged with a key)"
    );
    println!("  database     {}{db_note}", redact_url(url));
    println!(
        "  traffic      {} tool calls/s, with transport retries, redeliveries, re-issued calls, worker crashes,",
        args.rate
    );
    println!("               a payload-mismatch bug, lost keys and genuine repeat refunds");
    println!(
        "  mcp          a scripted MCP host through mcp-proxy's code to a simulated MCP refund server: /keys?q=M- (actor mcp:demo-assistant)"
    );
    println!(
        "  time         {speed}x: the {}s client deadline is {}, the guard's {}s provider timeout is {};",
        CLIENT_DEADLINE.as_secs(),
        secs(deadline),
        PROVIDER_TIMEOUT.as_secs(),
        secs(PROVIDER_TIMEOUT.div_f64(speed)),
    );
    println!(
        "               the provider forgets keys after {} (its 24 h, compressed)",
        secs(retention)
    );
    println!(
        "  provider     normal p99 {:.1}s; incident p99 {:.0}s, over the {}s deadline",
        normal.p99().as_secs_f64(),
        incident.p99().as_secs_f64(),
        CLIENT_DEADLINE.as_secs()
    );
    let length = clock(args.incident_length);
    match (args.incident, args.incident_every.0) {
        (true, Some(every)) => println!(
            "  incident     now for {length}, then every {}",
            clock(every)
        ),
        (true, None) => println!("  incident     now, for {length}"),
        (false, Some(every)) => println!(
            "  incident     at {} for {length}, then every {} (--incident starts one now)",
            clock(FIRST_INCIDENT),
            clock(every)
        ),
        (false, None) => println!("  incident     none scheduled (--incident starts one now)"),
    }
    println!("Ctrl-C to stop.");
}

fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 10.0 {
        format!("{s:.1}s")
    } else {
        format!("{s:.0}s")
    }
}

/// One live line: rewritten in place on a terminal, a new line every 5 s otherwise.
async fn print_status(demo: &Demo, stop: impl std::future::Future<Output = ()>, tty: bool) {
    let every = Duration::from_secs(if tty { 1 } else { 5 });
    let tick = Duration::from_millis(250);
    let mut since_print = Duration::ZERO;
    let mut incident = false;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            () = tokio::time::sleep(tick) => since_print += tick,
        }
        let now = demo.provider().incident();
        if now != incident {
            incident = now;
            let clear = if tty { "\r\x1b[2K" } else { "" };
            println!("{clear}{}", incident_news(now));
            since_print = every;
        }
        if since_print < every {
            continue;
        }
        since_print = Duration::ZERO;
        match demo.status().await {
            Ok(line) if tty => {
                let mut out = std::io::stdout().lock();
                let _ = write!(out, "\r\x1b[2K{line}");
                let _ = out.flush();
            }
            Ok(line) => println!("{line}"),
            Err(e) => tracing::warn!(error = %e, "demo: status unavailable"),
        }
    }
    if tty {
        println!();
    }
    println!("stopping: letting calls in flight finish...");
}

fn incident_news(active: bool) -> String {
    if active {
        let p99 = LatencyModel::INCIDENT.p99().as_secs_f64();
        format!(
            "INCIDENT: the provider's p99 is now {p99:.0}s, over the clients' {}s deadline: watch the replay ratio climb",
            CLIENT_DEADLINE.as_secs()
        )
    } else {
        "incident over: the provider is back to normal".to_string()
    }
}

fn parse_every(text: &str) -> Result<Every, String> {
    match text {
        "off" | "0" | "none" => Ok(Every(None)),
        _ => match parse_duration(text)? {
            d if d.is_zero() => Ok(Every(None)),
            d => Ok(Every(Some(d))),
        },
    }
}

fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if r > 0.0 && r <= 10_000.0 => Ok(r),
        _ => Err(format!(
            "{text:?}: the rate must be a number of calls per second above 0 and at most 10000"
        )),
    }
}

fn parse_speed(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if (1.0..=1000.0).contains(&s) => Ok(s),
        _ => Err(format!(
            "{text:?}: the speed must be between 1 (real time) and 1000"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incident_periods_can_be_turned_off() {
        assert_eq!(parse_every("off"), Ok(Every(None)));
        assert_eq!(parse_every("0"), Ok(Every(None)));
        assert_eq!(
            parse_every("10m"),
            Ok(Every(Some(Duration::from_secs(600))))
        );
        assert!(parse_every("10").is_err());
    }

    #[test]
    fn a_given_sqlite_file_is_created_when_missing_and_other_urls_are_kept() {
        assert_eq!(
            demo_database(Some("sqlite:///tmp/x.db")).unwrap(),
            ("sqlite:///tmp/x.db?mode=rwc".to_string(), None)
        );
        assert_eq!(
            demo_database(Some("sqlite://x.db?mode=ro")).unwrap().0,
            "sqlite://x.db?mode=ro"
        );
        assert_eq!(
            demo_database(Some("postgres://u@h/db")).unwrap().0,
            "postgres://u@h/db"
        );
    }

    #[test]
    fn a_password_in_the_demo_database_url_is_never_printed() {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from([
            "idemwatch",
            "demo",
            "--database-url",
            "postgres://app:s3cret@db/idem",
        ])
        .unwrap();
        assert!(!format!("{cli:?}").contains("s3cret"));
    }

    #[test]
    fn rates_and_speeds_out_of_range_are_refused_by_name() {
        assert!(parse_rate("0").unwrap_err().contains("rate"));
        assert!(parse_rate("abc").is_err());
        assert_eq!(parse_rate("2.5"), Ok(2.5));
        assert!(parse_speed("0.5").unwrap_err().contains("speed"));
    }
}
