//! `sandboxio secrets set|list|rm`: secrets sealed at rest for the egress proxy. Setting
//! and removing are operator actions through the gateway (each leaves a record with the
//! name and bound hosts, never the value); listing reads names and hosts only.

use std::io::Read as _;

use anyhow::Result;
use sandboxio_gateway::egress::secrets::{SecretError, SecretValue, MAX_VALUE};
use sandboxio_gateway::runtime;

use crate::args::{Common, SecretsCmd};
use crate::exit;
use crate::out::{errln, outln};
use crate::setup;

pub async fn secrets(common: &Common, cmd: SecretsCmd) -> Result<i32> {
    let loaded = setup::load(common)?;
    match cmd {
        SecretsCmd::Set { name, hosts } => {
            // Checked before reading the value, so a typo costs no typing.
            sandboxio_gateway::egress::secrets::validate_name(&name)?;
            sandboxio_gateway::egress::secrets::validate_hosts(&hosts)?;
            if super::stdin::is_terminal() {
                errln!("reading the value of `{name}` from standard input (end with Ctrl-D)");
            }
            let value = read_value()?;
            let rt = loaded.runtime(common, None)?;
            let store = rt.secret_store()?;
            rt.gateway()
                .set_secret(&store, &setup::actor(), &name, &hosts, &value)
                .await?;
            errln!("set secret `{name}`, bound to {}", hosts.join(", "));
        }
        SecretsCmd::List => {
            let key = runtime::secrets_key(|k| std::env::var(k).ok());
            let list = runtime::secret_store(&loaded.state_dir, key)?.list()?;
            if common.json {
                outln!("{}", crate::out::pretty(&list)?)?;
            } else if list.is_empty() {
                outln!("no secrets")?;
            } else {
                for s in list {
                    outln!("{}  hosts={}", s.name, s.hosts.join(","))?;
                }
            }
        }
        SecretsCmd::Rm { name } => {
            let rt = loaded.runtime(common, None)?;
            let store = rt.secret_store()?;
            rt.gateway()
                .remove_secret(&store, &setup::actor(), &name)
                .await?;
            errln!("removed secret `{name}`");
        }
    }
    Ok(exit::OK)
}

/// Standard input, at most the largest value plus a newline.
fn read_value() -> Result<SecretValue> {
    let mut buf = Vec::new();
    std::io::stdin()
        .lock()
        .take(MAX_VALUE as u64 + 3)
        .read_to_end(&mut buf)?;
    let value: Result<SecretValue, SecretError> = SecretValue::from_input(buf);
    Ok(value?)
}
