mod harness;
mod proxy;
mod server;
