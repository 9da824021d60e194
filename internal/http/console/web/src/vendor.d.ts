// cytoscape-elk ships no type declarations.
declare module "cytoscape-elk" {
  import type { Ext } from "cytoscape";
  const ext: Ext;
  export default ext;
}
