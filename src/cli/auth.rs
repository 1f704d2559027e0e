//! Authentication flags of `serve` (docs/AUTH.md), and the two helpers that write the
//! auth file's secrets: `idemwatch hash-password` and `idemwatch new-token`.

use crate::auth::sessions::SessionSettings;
use crate::auth::{AllowedHosts, AuthFile, Authenticator, Mode, Role, secrets};
use crate::duration::HumanDuration;
use anyhow::{Context, bail};
use clap::Args;
use std::fmt;
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::PathBuf;

/// The shortest `--session-secret` accepted: it signs sessions and CSRF tokens.
pub(crate) const MIN_SECRET_BYTES: usize = 32;

#[derive(Clone, Args)]
pub struct AuthArgs {
    /// The auth file (TOML): built-in users or trusted proxy headers, and API tokens.
    /// Without one, `serve` listens on loopback only and the local user is admin.
    #[arg(long, env = "IDEMWATCH_AUTH_FILE")]
    pub auth_file: Option<PathBuf>,
    /// Signs session cookies and CSRF tokens; at least 32 characters. Give every
    /// replica the same one. Without it each process makes a random one: logins end
    /// when it restarts, and a session from one replica is unknown to another.
    #[arg(long, env = "IDEMWATCH_SESSION_SECRET", hide_env_values = true)]
    pub session_secret: Option<String>,
    /// Serve on a non-loopback address without an auth file: everyone who can reach
    /// the port is admin and can resolve keys. Only behind something else that
    /// authenticates.
    #[arg(long, env = "IDEMWATCH_INSECURE_NO_AUTH")]
    pub insecure_no_auth: bool,
    /// Mark cookies `Secure` (sent over HTTPS only) and name them `__Host-idemwatch_…`
    /// (no sibling subdomain can plant one). Also set per request when a proxy says
    /// `X-Forwarded-Proto: https`.
    #[arg(long, env = "IDEMWATCH_COOKIE_SECURE")]
    pub cookie_secure: bool,
    /// Built-in users: a session not used for this long ends (sign in again).
    #[arg(long, env = "IDEMWATCH_SESSION_IDLE_TIMEOUT", default_value = "1h")]
    pub session_idle_timeout: HumanDuration,
    /// Built-in users: a session ends this long after sign-in, however busy.
    #[arg(long, env = "IDEMWATCH_SESSION_LIFETIME", default_value = "12h")]
    pub session_lifetime: HumanDuration,
    /// Send `Strict-Transport-Security: max-age=31536000` on every response: browsers
    /// then reach this host only over HTTPS for a year. Only behind TLS (idemwatch
    /// itself serves plain HTTP), and only once HTTPS works for good.
    #[arg(long, env = "IDEMWATCH_HSTS")]
    pub hsts: bool,
    /// A host name (optionally `name:port`) this server is reached under besides the
    /// loopback names; repeat, or separate with commas. Without an auth file, requests
    /// for any other `Host` are refused (DNS rebinding); in every mode, a
    /// state-changing request from a page on one of these origins is accepted.
    #[arg(
        long = "allowed-host",
        env = "IDEMWATCH_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub allowed_hosts: Vec<String>,
}

/// The session secret is never printed.
impl fmt::Debug for AuthArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthArgs")
            .field("auth_file", &self.auth_file)
            .field(
                "session_secret",
                &self.session_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("insecure_no_auth", &self.insecure_no_auth)
            .field("cookie_secure", &self.cookie_secure)
            .field("session_idle_timeout", &self.session_idle_timeout)
            .field("session_lifetime", &self.session_lifetime)
            .field("hsts", &self.hsts)
            .field("allowed_hosts", &self.allowed_hosts)
            .finish()
    }
}

impl AuthArgs {
    /// How long sessions last, or why the two durations do not fit together.
    pub(crate) fn session_settings(&self) -> anyhow::Result<SessionSettings> {
        let (idle, lifetime) = (self.session_idle_timeout.0, self.session_lifetime.0);
        if idle < chrono::TimeDelta::minutes(1) || lifetime < chrono::TimeDelta::minutes(1) {
            bail!("--session-idle-timeout and --session-lifetime must be at least 1m");
        }
        if idle > lifetime {
            bail!(
                "--session-idle-timeout ({}) is longer than --session-lifetime ({}): it would never apply",
                self.session_idle_timeout,
                self.session_lifetime
            );
        }
        Ok(SessionSettings { idle, lifetime })
    }

    /// The authenticator `serve` uses on `listen`, or why it must not start.
    pub fn authenticator(&self, listen: SocketAddr) -> anyhow::Result<Authenticator> {
        let secret = match &self.session_secret {
            Some(s) if s.len() < MIN_SECRET_BYTES => bail!(
                "--session-secret is {} characters; use at least {MIN_SECRET_BYTES} \
                 (e.g. `openssl rand -hex 32`)",
                s.len()
            ),
            Some(s) => Some(s.as_bytes()),
            None => None,
        };
        let hosts = AllowedHosts::parse(&self.allowed_hosts).map_err(anyhow::Error::msg)?;
        let file = match &self.auth_file {
            Some(path) => Some(AuthFile::load(path).map_err(anyhow::Error::msg)?),
            None => None,
        };
        match &file {
            None if !listen.ip().is_loopback() && !self.insecure_no_auth => bail!(
                "refusing to serve on {listen} without authentication: anyone who can reach \
                 it could resolve keys. Give an auth file (--auth-file, see docs/AUTH.md), \
                 listen on a loopback address (--listen 127.0.0.1:8080), or, only behind \
                 something else that authenticates, pass --insecure-no-auth"
            ),
            None if !listen.ip().is_loopback() => tracing::warn!(
                %listen,
                "--insecure-no-auth: everyone who can reach this address is admin"
            ),
            None => tracing::info!("no auth file: loopback only, the local user is admin"),
            Some(f) => {
                tracing::info!(mode = ?f.mode, users = f.users.len(), tokens = f.tokens.len(), "authentication on")
            }
        }
        if secret.is_none() && file.as_ref().is_some_and(|f| f.mode == Mode::Builtin) {
            tracing::warn!(
                "no --session-secret: a random one is used, so logins end when this process \
                 restarts and do not carry over to other replicas"
            );
        }
        Ok(Authenticator::new(file, secret).with_allowed_hosts(hosts))
    }
}

#[derive(Debug, Clone, Args)]
pub struct NewTokenArgs {
    /// Who or what uses the token (recorded as `token:NAME` in the attempt log).
    #[arg(long)]
    pub name: String,
    /// Role of the token (repeat for several): viewer, resolver, auditor, admin, worker.
    #[arg(long = "role", default_value = "viewer")]
    pub roles: Vec<Role>,
    /// Limit the token's guard calls to this tenant (repeat for several; default any).
    #[arg(long = "tenant")]
    pub tenants: Vec<String>,
    /// Limit the token's guard calls to this tool (repeat for several; default any).
    #[arg(long = "tool")]
    pub tools: Vec<String>,
    /// The token stops working this long from now (`90d`, `12h`); default never.
    /// Written as `expires` in the entry; `idemwatch tokens` lists it.
    #[arg(long)]
    pub expires_in: Option<HumanDuration>,
}

#[derive(Debug, Clone, Args)]
pub struct EndSessionsArgs {
    #[command(flatten)]
    pub database: super::DatabaseArgs,
    /// The built-in user whose sessions end (a stolen cookie, a lost laptop).
    #[arg(long)]
    pub user: String,
}

/// `idemwatch end-sessions --user NAME`: ends every session of a user now, on every
/// replica (they share the database). Their next request goes to the login page.
pub async fn end_sessions_command(args: EndSessionsArgs) -> anyhow::Result<String> {
    let user = args.user.trim();
    if user.is_empty() {
        bail!("--user must name a user");
    }
    let store = super::serve::open_store(&args.database).await?;
    let sessions = crate::auth::sessions::Sessions::new(store.clone(), SessionSettings::default());
    let ended = sessions.end_user(user).await;
    store.close().await;
    let ended = ended.context("cannot end the sessions")?;
    tracing::info!(user, ended, "sessions ended");
    Ok(format!("ended {ended} session(s) of {user:?}"))
}

#[derive(Debug, Clone, Args)]
pub struct TokensArgs {
    /// The auth file whose tokens to list.
    #[arg(long, env = "IDEMWATCH_AUTH_FILE")]
    pub auth_file: PathBuf,
}

/// `idemwatch tokens`: the auth file's API tokens, one a line: name, roles, scope and
/// expiry (`expired` once past it). Hashes are not shown.
pub fn tokens_command(args: TokensArgs) -> anyhow::Result<String> {
    let file = AuthFile::load(&args.auth_file).map_err(anyhow::Error::msg)?;
    Ok(list_tokens(&file, chrono::Utc::now()))
}

fn list_tokens(file: &AuthFile, now: chrono::DateTime<chrono::Utc>) -> String {
    let mut out = String::from("NAME\tROLES\tTENANTS\tTOOLS\tEXPIRES\n");
    let list = |l: &Option<Vec<String>>| l.as_ref().map_or("any".to_string(), |l| l.join(","));
    for t in &file.tokens {
        let roles: Vec<&str> = t.roles.iter().map(|r| r.as_str()).collect();
        let expires = match t.expires {
            None => "never".to_string(),
            Some(e) if e <= now => format!("{} (expired)", e.to_rfc3339()),
            Some(e) => e.to_rfc3339(),
        };
        out.push_str(&format!(
            "{}\t{}\t{}\t{}\t{expires}\n",
            t.name,
            roles.join(","),
            list(&t.tenants),
            list(&t.tools)
        ));
    }
    out.trim_end().to_string()
}

/// `idemwatch hash-password`: the first line of standard input, as an argon2id PHC
/// string for `password_hash` in the auth file. Reading stdin keeps the password out
/// of the shell history and the process list.
pub fn hash_password_command(input: impl BufRead) -> anyhow::Result<String> {
    let mut line = String::new();
    let mut input = input;
    input
        .read_line(&mut line)
        .context("cannot read the password from standard input")?;
    let password = line.trim_end_matches(['\r', '\n']);
    if password.is_empty() {
        bail!("no password on standard input (e.g. `idemwatch hash-password < file`)");
    }
    secrets::hash_password(password).map_err(anyhow::Error::msg)
}

/// `idemwatch new-token`: a new token, shown once, and the auth file entry that stores
/// only its SHA-256.
pub fn new_token_command(args: NewTokenArgs) -> anyhow::Result<String> {
    let name = args.name.trim();
    if name.is_empty() || name.contains(['"', '\\', '\n']) {
        bail!("--name must be non-empty and contain no quotes, backslashes or newlines");
    }
    let quoted = |flag: &str, values: &[String]| -> anyhow::Result<String> {
        let mut out = Vec::new();
        for v in values {
            if v.is_empty() || v.contains(['"', '\\', '\n']) {
                bail!(
                    "{flag} {v:?} must be non-empty and contain no quotes, backslashes or newlines"
                );
            }
            out.push(format!("\"{v}\""));
        }
        Ok(out.join(", "))
    };
    let token = secrets::new_token();
    let roles: Vec<String> = args.roles.iter().map(|r| format!("\"{r}\"")).collect();
    let mut scope = String::new();
    if !args.tenants.is_empty() {
        scope.push_str(&format!(
            "\ntenants = [{}]",
            quoted("--tenant", &args.tenants)?
        ));
    }
    if !args.tools.is_empty() {
        scope.push_str(&format!("\ntools = [{}]", quoted("--tool", &args.tools)?));
    }
    if let Some(d) = args.expires_in {
        if d.0 <= chrono::TimeDelta::zero() {
            bail!("--expires-in must be above 0");
        }
        let at = chrono::Utc::now()
            .checked_add_signed(d.0)
            .filter(|t| crate::time_input::in_range(*t))
            .context("--expires-in is too far in the future")?;
        scope.push_str(&format!(
            "\nexpires = \"{}\"",
            at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        ));
    }
    Ok(format!(
        "token: {token}\n\
         (shown once: store it in the script's secret store now)\n\
         \n\
         # add to the auth file:\n\
         [[tokens]]\n\
         name = \"{name}\"\n\
         sha256 = \"{}\"\n\
         roles = [{}]{scope}",
        secrets::hash_token(&token),
        roles.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> AuthArgs {
        AuthArgs {
            auth_file: None,
            session_secret: None,
            insecure_no_auth: false,
            cookie_secure: false,
            session_idle_timeout: "1h".parse().unwrap(),
            session_lifetime: "12h".parse().unwrap(),
            hsts: false,
            allowed_hosts: Vec::new(),
        }
    }

    #[test]
    fn without_auth_only_loopback_is_served_unless_insecure_is_explicit() {
        let public: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let err = args().authenticator(public).unwrap_err().to_string();
        assert!(
            err.contains("without authentication") && err.contains("--insecure-no-auth"),
            "{err}"
        );
        assert!(
            args()
                .authenticator("127.0.0.1:8080".parse().unwrap())
                .is_ok()
        );
        assert!(args().authenticator("[::1]:8080".parse().unwrap()).is_ok());
        let insecure = AuthArgs {
            insecure_no_auth: true,
            ..args()
        };
        assert!(insecure.authenticator(public).is_ok());
    }

    #[test]
    fn allowed_hosts_repeat_or_split_on_commas_and_must_be_host_names() {
        use clap::Parser;
        let cli = super::super::Cli::try_parse_from([
            "idemwatch",
            "serve",
            "--allowed-host",
            "a.example,b.example:8080",
            "--allowed-host",
            "c.example",
        ])
        .unwrap();
        let super::super::Command::Serve(serve) = cli.command else {
            panic!("not serve");
        };
        assert_eq!(
            serve.auth.allowed_hosts,
            ["a.example", "b.example:8080", "c.example"]
        );
        let auth = serve
            .auth
            .authenticator("127.0.0.1:8080".parse().unwrap())
            .unwrap();
        assert!(auth.allowed_hosts().allows("b.example:8080"));
        let bad = AuthArgs {
            allowed_hosts: vec!["http://x.example/".into()],
            ..args()
        };
        let err = bad
            .authenticator("127.0.0.1:1".parse().unwrap())
            .unwrap_err();
        assert!(err.to_string().contains("--allowed-host"), "{err}");
    }

    #[test]
    fn a_short_session_secret_is_refused_and_never_printed() {
        let short = AuthArgs {
            session_secret: Some("hunter2".into()),
            ..args()
        };
        let err = short
            .authenticator("127.0.0.1:1".parse().unwrap())
            .unwrap_err();
        assert!(err.to_string().contains("at least 32"), "{err}");
        assert!(!format!("{short:?}").contains("hunter2"));
    }

    #[test]
    fn a_new_token_prints_the_entry_that_matches_it() {
        let out = new_token_command(NewTokenArgs {
            name: "nightly-export".into(),
            roles: vec![Role::Auditor],
            tenants: vec![],
            tools: vec![],
            expires_in: None,
        })
        .unwrap();
        let token = out
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("token: "))
            .unwrap();
        let file = AuthFile::parse(&format!(
            "mode = \"builtin\"\n{}",
            out.split_once("# add to the auth file:\n").unwrap().1
        ))
        .unwrap();
        assert_eq!(file.tokens[0].sha256, secrets::hash_token(token));
        assert_eq!(file.tokens[0].roles, [Role::Auditor]);
    }

    #[test]
    fn a_worker_token_can_be_limited_to_tenants_and_tools() {
        let out = new_token_command(NewTokenArgs {
            name: "agents".into(),
            roles: vec![Role::Worker],
            tenants: vec!["acme".into(), "globex".into()],
            tools: vec!["issue_refund".into()],
            expires_in: None,
        })
        .unwrap();
        let file = AuthFile::parse(&format!(
            "mode = \"builtin\"\n{}",
            out.split_once("# add to the auth file:\n").unwrap().1
        ))
        .unwrap();
        let t = &file.tokens[0];
        assert_eq!(t.roles, [Role::Worker]);
        assert_eq!(
            t.tenants.as_deref(),
            Some(&["acme".to_string(), "globex".to_string()][..])
        );
        assert_eq!(t.tools.as_deref(), Some(&["issue_refund".to_string()][..]));
        let bad = NewTokenArgs {
            name: "agents".into(),
            roles: vec![Role::Worker],
            tenants: vec!["a\"b".into()],
            tools: vec![],
            expires_in: None,
        };
        assert!(new_token_command(bad).is_err());
    }

    #[test]
    fn a_token_can_expire_and_the_list_says_when() {
        let out = new_token_command(NewTokenArgs {
            name: "quarterly".into(),
            roles: vec![Role::Viewer],
            tenants: vec![],
            tools: vec![],
            expires_in: Some("90d".parse().unwrap()),
        })
        .unwrap();
        let file = AuthFile::parse(&format!(
            "mode = \"builtin\"\n{}\n[[tokens]]\nname = \"forever\"\nsha256 = \"{}\"\nroles = [\"auditor\"]\ntools = [\"a\", \"b\"]\n",
            out.split_once("# add to the auth file:\n").unwrap().1,
            "0".repeat(64)
        ))
        .unwrap();
        let expires = file.tokens[0].expires.unwrap();
        let in_90d = chrono::Utc::now() + chrono::TimeDelta::days(90);
        assert!((expires - in_90d).num_seconds().abs() < 5, "{expires}");
        let list = list_tokens(&file, chrono::Utc::now());
        let lines: Vec<&str> = list.lines().collect();
        assert_eq!(lines[0], "NAME\tROLES\tTENANTS\tTOOLS\tEXPIRES");
        assert!(
            lines[1].starts_with("quarterly\tviewer\tany\tany\t2"),
            "{list}"
        );
        assert_eq!(lines[2], "forever\tauditor\tany\ta,b\tnever");
        let later = list_tokens(&file, in_90d + chrono::TimeDelta::days(1));
        assert!(
            later.lines().nth(1).unwrap().ends_with("(expired)"),
            "{later}"
        );
        let zero = NewTokenArgs {
            name: "x".into(),
            roles: vec![],
            tenants: vec![],
            tools: vec![],
            expires_in: Some("0".parse().unwrap()),
        };
        assert!(new_token_command(zero).is_err());
    }

    #[test]
    fn hash_password_reads_one_line_and_refuses_nothing() {
        let phc = hash_password_command("correct horse\n".as_bytes()).unwrap();
        assert!(secrets::verify_password("correct horse", &phc));
        assert!(hash_password_command("\n".as_bytes()).is_err());
    }
}
