// Swagger UI from the API's own copy of its assets (no CDN); the validator badge is off because it
// would send the schema to validator.swagger.io.
"use strict";
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  validatorUrl: null,
  deepLinking: true,
});
