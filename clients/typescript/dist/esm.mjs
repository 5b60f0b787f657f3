// The ES module door: the same objects as require("baton-client") (one copy
// of the code, so `instanceof LockLost` holds whichever door a program's
// modules came through).
export * from "./index.js";
