module github.com/batonlock/baton/clients/go

go 1.26.0
