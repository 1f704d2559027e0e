//! How long decided keys are kept, and the start-up refusal of a retention that would
//! let a retry arrive after its record is gone.

use crate::duration::HumanDuration;
use crate::store::PruneCutoffs;
use chrono::{DateTime, Utc};
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq)]
pub struct RetentionSettings {
    /// DONE keys (record and attempts) are kept this long after their last activity.
    pub retain_done: HumanDuration,
    /// FAILED keys are kept this long: they are what people investigate.
    pub retain_failed: HumanDuration,
    /// The longest a workflow runs, waits for approvals included: a step may be
    /// retried until then.
    pub max_workflow_duration: HumanDuration,
    /// The longest key retention of any tool's provider (providers differ: 30 minutes
    /// to 30 days).
    pub max_provider_key_retention: HumanDuration,
    /// Pruned rows are written here as NDJSON (with a manifest) before deletion.
    pub archive_dir: Option<PathBuf>,
    /// Time between the starts of pruning runs; zero turns the background pruner off.
    pub interval: HumanDuration,
    /// Keys per batch (one transaction).
    pub batch_size: u32,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        Self {
            retain_done: HumanDuration::days(30),
            retain_failed: HumanDuration::days(90),
            max_workflow_duration: HumanDuration::days(7),
            max_provider_key_retention: HumanDuration::days(30),
            archive_dir: None,
            interval: HumanDuration(chrono::TimeDelta::minutes(5)),
            batch_size: 500,
        }
    }
}

pub const MAX_BATCH_SIZE: u32 = 10_000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetentionError {
    #[error(
        "{flag} {value} is shorter than {limit_flag} {limit}: {why}. Raise {flag} to at least {limit}, or correct {limit_flag} if it overstates"
    )]
    TooShort {
        flag: &'static str,
        value: String,
        limit_flag: &'static str,
        limit: String,
        why: &'static str,
    },
    #[error("invalid {flag}: {message}")]
    Invalid { flag: &'static str, message: String },
}

const WORKFLOW_WHY: &str = "a workflow may retry a step until it ends, and a retry that finds no \
    record is claimed as new and performs the effect again — the duplicate idemwatch exists to prevent";
const PROVIDER_WHY: &str = "while the provider still remembers a key a retry is still expected; \
    idemwatch must not forget a key before the provider does, or the record and attempt log that \
    explain a provider-side replay are gone when support needs them";

impl RetentionSettings {
    /// Refuses settings that would prune a key a retry may still reach.
    pub fn check(&self) -> Result<(), RetentionError> {
        for (flag, value) in [
            ("--retain-done", self.retain_done),
            ("--retain-failed", self.retain_failed),
        ] {
            if value.is_zero() {
                return Err(RetentionError::Invalid {
                    flag,
                    message: "must be longer than 0".into(),
                });
            }
            for (limit_flag, limit, why) in [
                (
                    "--max-workflow-duration",
                    self.max_workflow_duration,
                    WORKFLOW_WHY,
                ),
                (
                    "--max-provider-key-retention",
                    self.max_provider_key_retention,
                    PROVIDER_WHY,
                ),
            ] {
                if value < limit {
                    return Err(RetentionError::TooShort {
                        flag,
                        value: value.to_string(),
                        limit_flag,
                        limit: limit.to_string(),
                        why,
                    });
                }
            }
        }
        if self.batch_size == 0 || self.batch_size > MAX_BATCH_SIZE {
            return Err(RetentionError::Invalid {
                flag: "--prune-batch-size",
                message: format!(
                    "must be between 1 and {MAX_BATCH_SIZE} (small batches keep locks short)"
                ),
            });
        }
        Ok(())
    }

    pub fn cutoffs(&self, now: DateTime<Utc>) -> PruneCutoffs {
        PruneCutoffs {
            done_before: now - self.retain_done.0,
            failed_before: now - self.retain_failed.0,
            now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(text: &str) -> HumanDuration {
        text.parse().unwrap()
    }

    #[test]
    fn the_defaults_pass() {
        RetentionSettings::default().check().unwrap();
    }

    #[test]
    fn a_retention_shorter_than_the_longest_workflow_is_refused_and_explained() {
        let s = RetentionSettings {
            retain_done: d("3d"),
            ..RetentionSettings::default()
        };
        let err = s.check().unwrap_err().to_string();
        assert!(
            err.starts_with("--retain-done 3d is shorter than --max-workflow-duration 7d"),
            "{err}"
        );
        assert!(err.contains("performs the effect again"), "{err}");
    }

    #[test]
    fn a_retention_shorter_than_the_provider_key_retention_is_refused() {
        let s = RetentionSettings {
            retain_failed: d("14d"),
            max_provider_key_retention: d("30d"),
            ..RetentionSettings::default()
        };
        let err = s.check().unwrap_err().to_string();
        assert!(
            err.starts_with("--retain-failed 14d is shorter than --max-provider-key-retention 30d"),
            "{err}"
        );
    }

    #[test]
    fn equal_is_enough_and_batches_stay_small() {
        let s = RetentionSettings {
            retain_done: d("30d"),
            max_workflow_duration: d("30d"),
            ..RetentionSettings::default()
        };
        s.check().unwrap();
        let s = RetentionSettings {
            batch_size: 0,
            ..RetentionSettings::default()
        };
        assert!(
            s.check()
                .unwrap_err()
                .to_string()
                .contains("--prune-batch-size")
        );
    }
}
