-- concurrency_ext lives in its own schema. The script creates it, so that it is
-- a member of the extension: DROP EXTENSION removes it, and refuses (unless
-- CASCADE) while queue tables, which are user data, are still in it.
CREATE SCHEMA concurrency;
GRANT USAGE ON SCHEMA concurrency TO PUBLIC;

-- concurrency.version() — the version of the loaded C++ module.
CREATE FUNCTION concurrency.version() RETURNS text
    LANGUAGE c STABLE PARALLEL SAFE
    AS 'MODULE_PATHNAME', 'concurrency_version';
COMMENT ON FUNCTION concurrency.version() IS 'version of the loaded concurrency_ext module';
