// ESLint over the explorer's ES modules (service/static/), run by `make lint-js`: the recommended rules plus
// a few that catch what review would (loose equality, var, shadowed names, unused values, implicit
// coercions). Undefined names are TypeScript's to find (jsconfig.json checks every module against the DOM's
// types), so no-undef is off and no list of browser globals is needed.
import js from "@eslint/js";

const STATIC = ["service/static/**/*.js"];

export default [
  { ...js.configs.recommended, files: STATIC },
  {
    files: STATIC,
    languageOptions: { ecmaVersion: 2024, sourceType: "module" },
    linterOptions: { reportUnusedDisableDirectives: "error" },
    rules: {
      "no-undef": "off",
      "no-unused-vars": ["error", { caughtErrors: "all" }],
      eqeqeq: "error",
      "no-var": "error",
      "prefer-const": "error",
      "no-shadow": "error",
      "no-implicit-coercion": "error",
      "consistent-return": "error",
    },
  },
];
