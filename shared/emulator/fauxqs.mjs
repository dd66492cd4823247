// Starts the fauxqs SQS emulator for shared/emulator on 127.0.0.1 only.
//
// fauxqs's own CLI listens on every interface; building the app ourselves
// lets us bind loopback. Usage: node fauxqs.mjs PORT [runledger.session=ID]
// (the session marker only labels the command line for `make test`).
//
// With RUNLEDGER_WATCH_STDIN=1 in its environment it exits when its stdin
// reaches end of file: the parent holding the other end of that pipe died.
import { buildApp } from "fauxqs";

const port = Number.parseInt(process.argv[2] ?? "", 10);
if (!Number.isInteger(port) || port <= 0 || port > 65535) {
  console.error(`fauxqs.mjs: want a port number, got ${JSON.stringify(process.argv[2])}`);
  process.exit(2);
}

if (process.env.RUNLEDGER_WATCH_STDIN === "1") {
  const parentGone = () => {
    console.error("fauxqs.mjs: stdin closed, the parent is gone: exiting");
    process.exit(0);
  };
  process.stdin.on("end", parentGone);
  process.stdin.on("error", parentGone);
  process.stdin.resume();
}

const app = buildApp({ logger: process.env.RUNLEDGER_FAUXQS_LOG === "true" });
try {
  await app.listen({ port, host: "127.0.0.1" });
} catch (err) {
  // EADDRINUSE lands here; the Go side reads this line and retries another port.
  console.error(`fauxqs.mjs: listen 127.0.0.1:${port}: ${err.code ?? ""} ${err.message}`);
  process.exit(1);
}
console.log(`fauxqs listening on 127.0.0.1:${port}`);
