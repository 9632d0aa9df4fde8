/// <reference types="vitest/config" />
import { defineConfig } from 'vite'
import react from '@vitejs/plugin-react'
import tailwindcss from '@tailwindcss/vite'
import { fileURLToPath } from 'node:url'

// Plain SPA build; the Rust server serves dist/ at http://127.0.0.1:8000/.
export default defineConfig({
  plugins: [react(), tailwindcss()],
  resolve: {
    alias: [
      // rehype-katex turns KaTeX's HTML into a tree. The package's browser build parses it with the
      // DOM, and the browser reports every `style` attribute it meets to the server's CSP
      // (`style-src 'self'`), though React then applies those styles through the CSSOM. Its
      // default build parses with parse5, off the DOM: no report, and the policy stays strict.
      // It lands in the lazily loaded KaTeX chunk.
      {
        find: /^hast-util-from-html-isomorphic$/,
        replacement: fileURLToPath(new URL('./node_modules/hast-util-from-html-isomorphic/index.js', import.meta.url)),
      },
    ],
  },
  server: { host: '127.0.0.1', port: 5173 },
  build: {
    target: 'es2022',
    sourcemap: false,
    rolldownOptions: {
      output: {
        // React and the Markdown stack change less often than the app: separate, cacheable chunks.
        codeSplitting: {
          groups: [
            { name: 'react', test: /node_modules[\\/](react|react-dom|scheduler)[\\/]/ },
            {
              name: 'markdown',
              test: /node_modules[\\/](react-markdown|remark-[^\\/]+|mdast-[^\\/]+|micromark[^\\/]*|unified|hast-(?!util-from-(?:html|parse5))[^\\/]+|unist-[^\\/]+|vfile[^\\/]*|property-information|decode-named-character-reference|character-entities[^\\/]*|markdown-table|ccount|devlop|bail|trough|is-plain-obj|zwitch|longest-streak|space-separated-tokens|comma-separated-tokens|html-url-attributes|trim-lines|estree-util-[^\\/]+|style-to-[^\\/]+|inline-style-parser)[\\/]/,
            },
          ],
        },
      },
    },
  },
  test: {
    include: ['src/**/*.test.{ts,tsx}'],
    environment: 'node',
  },
})
