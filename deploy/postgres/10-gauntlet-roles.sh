#!/bin/sh
# Run once by the postgres image on an empty data directory (docker-entrypoint-initdb.d).
# Creates the owner role the validator and migrations use, and the SELECT-only role of the API.
# Default privileges make every table a later migration creates readable by the API role.
set -eu
: "${DB_OWNER_PASSWORD:?set DB_OWNER_PASSWORD}"
: "${DB_API_PASSWORD:?set DB_API_PASSWORD}"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v owner_pw="$DB_OWNER_PASSWORD" -v api_pw="$DB_API_PASSWORD" <<'SQL'
CREATE ROLE gauntlet LOGIN PASSWORD :'owner_pw';
CREATE ROLE gauntlet_api LOGIN PASSWORD :'api_pw';
ALTER DATABASE gauntlet OWNER TO gauntlet;
REVOKE ALL ON DATABASE gauntlet FROM PUBLIC;
GRANT CONNECT ON DATABASE gauntlet TO gauntlet, gauntlet_api;
GRANT USAGE ON SCHEMA public TO gauntlet_api;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO gauntlet_api;
ALTER DEFAULT PRIVILEGES FOR ROLE gauntlet IN SCHEMA public GRANT SELECT ON TABLES TO gauntlet_api;
SQL
