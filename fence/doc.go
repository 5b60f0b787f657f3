// Package fence holds the resource-side halves of Baton's fencing kits,
// the files a user loads into the resource: postgres/baton_fence.sql and
// redis/*.lua. Its tests run them against real PostgreSQL and Redis
// servers, with the Go client's helpers (clients/go/fence) driven by real
// drivers and real lock holders. docs/fencing.md says how to use them.
package fence
