mod browse;
mod chain;
mod concurrency;
mod front_end;
mod replicas;
mod session;
mod store;
