use chrono::{DateTime, Utc};
use sandboxio_core::{Operation, OperationArgs, Principal};
use sandboxio_policy::{Context, PolicySet, PolicySource};

pub fn noon() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2024-01-01T12:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

pub fn ctx() -> Context<'static> {
    Context::new(noon())
}

pub fn op(args: OperationArgs) -> Operation {
    Operation::new(Principal::tenant("acme"), args)
}

pub fn exec(argv: &[&str]) -> Operation {
    op(OperationArgs::Exec {
        argv: argv.iter().map(|s| s.to_string()).collect(),
    })
}

pub fn read(path: &str) -> Operation {
    op(OperationArgs::FileRead { path: path.into() })
}

pub fn delete(path: &str) -> Operation {
    op(OperationArgs::FileDelete { path: path.into() })
}

pub fn net(host: &str, port: u16) -> Operation {
    op(OperationArgs::NetConnect {
        host: host.into(),
        port,
    })
}

pub fn tool(name: &str) -> Operation {
    op(OperationArgs::ToolCall {
        tool: name.into(),
        arguments: serde_json::Value::Null,
    })
}

pub fn policy(text: &str) -> PolicySet {
    PolicySet::from_str("test.toml", text).unwrap_or_else(|e| panic!("{e}"))
}

pub fn policies(files: &[(&str, &str)]) -> PolicySet {
    let sources: Vec<PolicySource> = files
        .iter()
        .map(|(n, t)| PolicySource::new(*n, t.as_bytes()))
        .collect();
    PolicySet::from_sources(&sources).unwrap_or_else(|e| panic!("{e}"))
}
