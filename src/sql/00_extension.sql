-- concurrency_ext lives in its own schema. The script creates it, so that it is
-- a member of the extension: DROP EXTENSION removes it, and refuses (unless
-- CASCADE) while queue tables, which are user data, are still in it.
CREATE SCHEMA IF NOT EXISTS concurrency;
GRANT USAGE ON SCHEMA concurrency TO PUBLIC;

-- concurrency.version() — the version of the loaded C++ module.
CREATE OR REPLACE FUNCTION concurrency.version() RETURNS text
    LANGUAGE c STABLE PARALLEL SAFE
    AS 'MODULE_PATHNAME', 'concurrency_version';
COMMENT ON FUNCTION concurrency.version() IS 'version of the loaded concurrency_ext module';


-- concurrency_internal: what is no API (routed functions of distributed queues, trigger
-- functions, the rows behind views), so that \df concurrency.* lists the public API only.
CREATE SCHEMA IF NOT EXISTS concurrency_internal;
REVOKE ALL ON SCHEMA concurrency_internal FROM PUBLIC;
COMMENT ON SCHEMA concurrency_internal IS
    'internal functions of concurrency_ext (routed functions of distributed queues, trigger functions, the rows behind views); not an API: PUBLIC cannot use it';
