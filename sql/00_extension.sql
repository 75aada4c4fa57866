-- The extension installs into schema concurrency (its API) and
-- concurrency_internal (routed functions of distributed queues), and reports
-- its version.
SELECT extversion = concurrency.version() AS version_matches, extversion
  FROM pg_extension WHERE extname = 'concurrency_ext';
SELECT nspname, pg_describe_object(classid, objid, 0) AS member FROM pg_depend d JOIN pg_namespace n ON n.oid = d.objid
  WHERE d.classid = 'pg_namespace'::regclass AND d.deptype = 'e'
    AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'concurrency_ext')
  ORDER BY 1;

-- DROP EXTENSION leaves nothing behind: no schema, no function, no type.
DROP EXTENSION concurrency_ext;
SELECT count(*) AS schemas_left FROM pg_namespace WHERE nspname IN ('concurrency', 'concurrency_internal');
SELECT count(*) AS functions_left FROM pg_proc WHERE prosrc LIKE 'concurrency%' AND probin LIKE '%concurrency_ext';
CREATE EXTENSION concurrency_ext;
SELECT concurrency.version() IS NOT NULL AS back;
