// Unit tests of the pure modules (calls, table, record) in jsdom; the JupyterLab wiring is covered by
// the browser test (tests/browser/test_lab_extension.py) against a real JupyterLab.
module.exports = {
  testEnvironment: 'jsdom',
  testRegex: 'src/__tests__/.*\\.spec\\.ts$',
  transform: { '^.+\\.ts$': ['ts-jest', { isolatedModules: true, tsconfig: { module: 'commonjs', types: ['jest'] } }] }
};
