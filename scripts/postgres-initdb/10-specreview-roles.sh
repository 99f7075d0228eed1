#!/bin/sh
# Creates specreview's two database roles; run once by the postgres image on an empty data
# directory (mounted at /docker-entrypoint-initdb.d/, as POSTGRES_USER on POSTGRES_DB).
#
#   owner (SPECREVIEW_DB_OWNER, default specreview_owner): runs `manage.py migrate`, so it owns
#       every table and the immutability triggers of the decision archive.
#   app   (SPECREVIEW_DB_APP, default specreview_app): what web and workers connect as. It can
#       read and write rows and nothing else: it owns no table, so it cannot ALTER TABLE ...
#       DISABLE TRIGGER, DROP TRIGGER, TRUNCATE, or change the schema; it is no superuser, so it
#       cannot SET session_replication_role = replica either.
#
# The passwords come from SPECREVIEW_DB_OWNER_PASSWORD and SPECREVIEW_DB_APP_PASSWORD (required).
# tests/test_deploy.py runs this file against a scratch database. See docs/deploy.md.
set -eu
: "${SPECREVIEW_DB_OWNER_PASSWORD:?set SPECREVIEW_DB_OWNER_PASSWORD}"
: "${SPECREVIEW_DB_APP_PASSWORD:?set SPECREVIEW_DB_APP_PASSWORD}"

psql -v ON_ERROR_STOP=1 --no-psqlrc \
  --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-specreview}" \
  -v db="${POSTGRES_DB:-specreview}" \
  -v owner="${SPECREVIEW_DB_OWNER:-specreview_owner}" \
  -v owner_password="$SPECREVIEW_DB_OWNER_PASSWORD" \
  -v app="${SPECREVIEW_DB_APP:-specreview_app}" \
  -v app_password="$SPECREVIEW_DB_APP_PASSWORD" <<'EOSQL'
CREATE ROLE :"owner" LOGIN PASSWORD :'owner_password'
    NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
CREATE ROLE :"app" LOGIN PASSWORD :'app_password'
    NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS NOINHERIT;

REVOKE ALL ON DATABASE :"db" FROM PUBLIC;
GRANT CONNECT, TEMPORARY ON DATABASE :"db" TO :"owner";
GRANT CONNECT ON DATABASE :"db" TO :"app";

-- Only the owner creates objects; the app may look them up.
REVOKE ALL ON SCHEMA public FROM PUBLIC;
GRANT USAGE, CREATE ON SCHEMA public TO :"owner";
GRANT USAGE ON SCHEMA public TO :"app";

-- Every table and sequence the owner's migrations create: row access for the app, no more
-- (no TRUNCATE, REFERENCES or TRIGGER privilege).
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO :"app";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA public
    GRANT USAGE, SELECT ON SEQUENCES TO :"app";
EOSQL
