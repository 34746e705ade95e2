mod config;
mod latency;
mod ledger;
mod props;
mod ratelimit;
