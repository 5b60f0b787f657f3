module github.com/batonlock/baton/bench

go 1.26.0

require github.com/batonlock/baton v0.0.0

replace github.com/batonlock/baton => ../
