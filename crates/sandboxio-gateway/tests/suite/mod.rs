mod chain;
mod concurrency;
mod front_end;
mod session;
mod store;
