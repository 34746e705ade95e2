mod chain;
mod concurrency;
mod session;
mod store;
