//! Where the soak's time goes, sample by sample: CPU by process group (this process,
//! PostgreSQL's client backends, its autovacuum workers, its other processes) read
//! from `/proc`, the host's busy share, PostgreSQL's buffer hits and reads, autovacuum
//! runs and dead tuples per table, every table's size, and (when the cluster preloads
//! `pg_stat_statements`) the statements that took the most time in the interval.
//!
//! Written to answer one question: why the guard's latency drifted up over the hour
//! of 2026-12-04 while the rate and the row counts stayed flat (docs/PERFORMANCE.md).
//! Everything here is read as a difference between two samples; a process that
//! starts and ends between two one-second scans is not seen, and one that ends loses
//! its last second (autovacuum workers: their runs are counted from
//! `pg_stat_user_tables` as well).

use serde_json::{Value, json};
use sqlx::PgPool;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// CPU seconds by group since the last `take`, from one-second scans of `/proc`.
#[derive(Default)]
struct CpuTotals {
    by_group: HashMap<&'static str, f64>,
    /// Host-wide jiffies (busy, all) since the last `take`.
    host_busy: u64,
    host_all: u64,
}

pub struct Diag {
    pg: PgPool,
    cpu: Arc<Mutex<CpuTotals>>,
    statements: Option<HashMap<i64, (i64, f64, String)>>,
    counters: HashMap<String, i64>,
}

/// The group a process belongs to, from its command line; `None` for processes that
/// are neither this one nor PostgreSQL's.
fn group(pid: u32, me: u32) -> Option<&'static str> {
    if pid == me {
        return Some("bench");
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let cmdline = String::from_utf8_lossy(&cmdline);
    let rest = cmdline.strip_prefix("postgres: ")?;
    Some(if rest.starts_with("autovacuum worker") {
        "pg_autovacuum"
    } else if [
        "walwriter",
        "checkpointer",
        "background writer",
        "autovacuum launcher",
        "logical replication launcher",
        "stats collector",
        "archiver",
        "walsummarizer",
    ]
    .iter()
    .any(|p| rest.starts_with(p))
    {
        "pg_service"
    } else {
        "pg_backend"
    })
}

/// utime + stime of a process, in jiffies.
fn ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: count from its end.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

fn host_jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal
    let all: u64 = cpu.iter().take(8).sum();
    let idle = cpu.get(3)? + cpu.get(4)?;
    Some((all - idle, all))
}

impl Diag {
    pub async fn start(pg: PgPool) -> Diag {
        let cpu = Arc::new(Mutex::new(CpuTotals::default()));
        let scan = cpu.clone();
        tokio::spawn(async move {
            let me = std::process::id();
            let mut seen: HashMap<u32, (&'static str, u64)> = HashMap::new();
            let mut host = host_jiffies();
            let mut first = true;
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let mut now: HashMap<u32, (&'static str, u64)> = HashMap::new();
                let mut deltas: Vec<(&'static str, u64)> = Vec::new();
                for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                    let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                        continue;
                    };
                    let group = match seen.get(&pid) {
                        Some((g, _)) => Some(*g),
                        None => group(pid, me),
                    };
                    let (Some(g), Some(t)) = (group, ticks(pid)) else {
                        continue;
                    };
                    // A process first seen after the first scan started since the last
                    // one: all its time is in this interval.
                    let before = seen.get(&pid).map_or(if first { t } else { 0 }, |s| s.1);
                    deltas.push((g, t.saturating_sub(before)));
                    now.insert(pid, (g, t));
                }
                let host_now = host_jiffies();
                let mut totals = scan.lock().unwrap();
                for (g, d) in deltas {
                    *totals.by_group.entry(g).or_default() += d as f64 / 100.0;
                }
                if let (Some(a), Some(b)) = (host, host_now) {
                    totals.host_busy += b.0 - a.0;
                    totals.host_all += b.1 - a.1;
                }
                drop(totals);
                host = host_now;
                seen = now;
                first = false;
            }
        });
        let statements = match sqlx::raw_sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .execute(&pg)
            .await
        {
            Ok(_) => match statements(&pg).await {
                Ok(s) => Some(s),
                Err(e) => {
                    eprintln!(
                        "soak diagnostics: no statement times ({e}); start the cluster with \
                         shared_preload_libraries=pg_stat_statements to have them"
                    );
                    None
                }
            },
            Err(e) => {
                eprintln!("soak diagnostics: no statement times ({e})");
                None
            }
        };
        let mut diag = Diag {
            pg,
            cpu,
            statements,
            counters: HashMap::new(),
        };
        diag.counters = diag.counters().await;
        diag
    }

    /// Counters that are read as differences: buffer hits and reads, commits,
    /// autovacuum runs per table.
    async fn counters(&self) -> HashMap<String, i64> {
        let mut out = HashMap::new();
        let db: (i64, i64, i64, i64) = sqlx::query_as(
            "SELECT blks_hit, blks_read, xact_commit, temp_bytes FROM pg_stat_database \
             WHERE datname = current_database()",
        )
        .fetch_one(&self.pg)
        .await
        .unwrap();
        out.insert("db_blks_hit".into(), db.0);
        out.insert("db_blks_read".into(), db.1);
        out.insert("db_commits".into(), db.2);
        out.insert("db_temp_bytes".into(), db.3);
        let tables: Vec<(String, i64, i64, i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT t.relname::text, coalesce(heap_blks_hit, 0), coalesce(heap_blks_read, 0), \
             coalesce(idx_blks_hit, 0), coalesce(idx_blks_read, 0), autovacuum_count, \
             autoanalyze_count \
             FROM pg_stat_user_tables t JOIN pg_statio_user_tables s USING (relid)",
        )
        .fetch_all(&self.pg)
        .await
        .unwrap();
        for (t, hh, hr, ih, ir, av, aa) in tables {
            for (k, v) in [
                ("heap_hit", hh),
                ("heap_read", hr),
                ("idx_hit", ih),
                ("idx_read", ir),
                ("autovacuums", av),
                ("autoanalyzes", aa),
            ] {
                out.insert(format!("{t}.{k}"), v);
            }
        }
        out
    }

    /// The interval's figures since the last call, as JSON.
    pub async fn sample(&mut self) -> Value {
        let cpu = std::mem::take(&mut *self.cpu.lock().unwrap());
        let counters = self.counters().await;
        let deltas: HashMap<String, i64> = counters
            .iter()
            .map(|(k, v)| (k.clone(), v - self.counters.get(k).copied().unwrap_or(0)))
            .filter(|(_, d)| *d != 0)
            .collect();
        self.counters = counters;
        let sizes: Vec<(String, i64, i64, i64)> = sqlx::query_as(
            "SELECT relname::text, pg_table_size(relid), pg_indexes_size(relid), n_dead_tup \
             FROM pg_stat_user_tables ORDER BY pg_total_relation_size(relid) DESC",
        )
        .fetch_all(&self.pg)
        .await
        .unwrap();
        let mib = |b: i64| (b as f64 / 1_048_576.0 * 10.0).round() / 10.0;
        let tables: Value = sizes
            .into_iter()
            .filter(|(_, t, i, _)| t + i > 1_048_576)
            .map(|(name, t, i, dead)| {
                (
                    name,
                    json!({"table_mib": mib(t), "indexes_mib": mib(i), "dead_tuples": dead}),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into();
        let top = match &mut self.statements {
            Some(before) => match statements(&self.pg).await {
                Ok(now) => {
                    let mut d: Vec<(f64, i64, String)> = now
                        .iter()
                        .map(|(id, (calls, total, text))| {
                            let (c0, t0) = before.get(id).map_or((0, 0.0), |b| (b.0, b.1));
                            (total - t0, calls - c0, text.clone())
                        })
                        .filter(|(_, calls, _)| *calls > 0)
                        .collect();
                    d.sort_by(|a, b| b.0.total_cmp(&a.0));
                    *before = now;
                    d.into_iter()
                        .take(8)
                        .map(|(total_ms, calls, text)| {
                            json!({
                                "total_ms": total_ms.round(),
                                "calls": calls,
                                "mean_ms": (total_ms / calls as f64 * 1000.0).round() / 1000.0,
                                "query": text.chars().take(90).collect::<String>(),
                            })
                        })
                        .collect()
                }
                Err(_) => Vec::new(),
            },
            None => Vec::new(),
        };
        let round = |v: f64| (v * 100.0).round() / 100.0;
        json!({
            "cpu_s": cpu.by_group.iter().map(|(g, s)| (g.to_string(), json!(round(*s))))
                .collect::<serde_json::Map<_, _>>(),
            "host_busy": if cpu.host_all > 0 {
                round(cpu.host_busy as f64 / cpu.host_all as f64)
            } else {
                0.0
            },
            "counters": deltas,
            "tables": tables,
            "statements": top,
        })
    }
}

async fn statements(pg: &PgPool) -> Result<HashMap<i64, (i64, f64, String)>, sqlx::Error> {
    let rows: Vec<(i64, i64, f64, String)> = sqlx::query_as(
        "SELECT queryid, calls, total_exec_time, query FROM pg_stat_statements \
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND queryid IS NOT NULL",
    )
    .fetch_all(pg)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(id, calls, total, q)| (id, (calls, total, q)))
        .collect())
}
