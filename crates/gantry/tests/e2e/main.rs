//! End-to-end tests: the whole application on port 0, driven over real HTTP. The store is a
//! SQLite file in a temp dir, or a fresh PostgreSQL database per app when
//! `GANTRY_E2E_POSTGRES_URL` names a server.

mod admin;
mod admin_users;
mod alarms;
mod audit;
mod auth;
mod bounds;
mod catalog;
mod console;
mod console_admin;
mod console_alarms;
mod console_overview;
mod console_rules;
mod console_users;
mod crash;
mod desired;
mod errors;
mod events;
mod external;
mod faults;
mod flood;
mod helpers;
mod logs;
mod metrics;
mod mqtt;
mod openapi;
mod operations;
mod presence;
mod readme;
mod rotation;
mod routes;
mod series;
mod startup;
mod stream;
mod tls;
mod users;
mod walkthrough;
mod webhooks;
