//! `idemwatch key` and `idemwatch fingerprint`: print what the guard computes, so a
//! guard written in another language can be checked against this one.

use super::{FingerprintArgs, KeyArgs};
use crate::base::canonical::canonical_json;
use crate::guard::{BusinessArgs, Intent};
use anyhow::Context;

pub fn key_command(args: KeyArgs) -> anyhow::Result<String> {
    let intent = Intent {
        tenant: args.tenant,
        tool: args.tool,
        workflow_id: args.workflow_id,
        step_id: args.step_id,
        intent_id: args.intent_id,
    };
    let key = intent.key()?;
    if args.verbose {
        let canonical = canonical_json(&serde_json::to_value(&intent)?)?;
        Ok(format!("canonical: {canonical}\nkey: {key}"))
    } else {
        Ok(key.to_string())
    }
}

pub fn fingerprint_command(args: FingerprintArgs) -> anyhow::Result<String> {
    let value: serde_json::Value =
        serde_json::from_str(&args.args).context("--args is not valid JSON")?;
    let business = BusinessArgs::new(&value, &args.exclude).context("--args")?;
    if args.verbose {
        Ok(format!(
            "canonical: {}\nfingerprint: {}",
            business.canonical, business.fingerprint
        ))
    } else {
        Ok(business.fingerprint.to_string())
    }
}
