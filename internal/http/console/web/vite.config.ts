// Builds the console into ../dist, which internal/http/console embeds. The output
// is not committed: dist/.keep is, so that `go build` works without node,
// and the build writes it back after emptying the directory.
import { writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { defineConfig, type Plugin } from "vite";

const outDir = fileURLToPath(new URL("../dist", import.meta.url));

const keep: Plugin = {
  name: "orion-keep-placeholder",
  apply: "build",
  closeBundle() {
    writeFileSync(resolve(outDir, ".keep"), "");
  },
};

// `npm run dev` serves the console with hot reload and proxies the API to a
// running server: ORION_SERVER (default http://127.0.0.1:8080).
const server = process.env.ORION_SERVER ?? "http://127.0.0.1:8080";

export default defineConfig({
  base: "/",
  build: {
    outDir,
    emptyOutDir: true,
    target: "es2022",
    chunkSizeWarningLimit: 3000,
    reportCompressedSize: false,
  },
  plugins: [keep],
  server: {
    host: "127.0.0.1",
    proxy: {
      "/api": { target: server, changeOrigin: true },
      "/metrics": { target: server, changeOrigin: true },
      "/healthz": { target: server, changeOrigin: true },
    },
  },
});
