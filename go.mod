module github.com/unitlet/unitlet

go 1.26
