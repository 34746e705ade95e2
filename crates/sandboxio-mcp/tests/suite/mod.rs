mod harness;
mod hostile;
mod http;
mod proxy;
mod server;
mod subscribe;
