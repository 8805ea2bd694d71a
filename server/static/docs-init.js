// Swagger UI on /docs, from the pinned swagger-ui-py package (no CDN). Sign in with
// "Authorize" and the token `pivot serve` printed.
"use strict";
window.ui = SwaggerUIBundle({ url: "/openapi.json", dom_id: "#swagger-ui", deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis], layout: "BaseLayout" });
